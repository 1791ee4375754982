"""The integrity probes (PROTOCOL.md, "Integrity")."""

import textwrap
import unittest

import torch

from .support import Worker, WorkerTestCase


class IntegrityProbeTests(WorkerTestCase):
    """The measurements behind the integrity flags (PROTOCOL.md, "Integrity")."""

    SQUARE = """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def forward(self, x):
                return x * x

        def get_inputs():
            return [torch.randn(64, 64)]

        def get_init_inputs():
            return []
    """

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.square = cls.files.write("20_Square.py", cls.SQUARE)

    def setUp(self):
        # A candidate worker of its own per test, as the harness starts one per candidate:
        # a patch made by one candidate stays in its process.
        self.cand = Worker("candidate")
        hello, _ = self.cand.recv()
        self.assertEqual(hello["type"], "hello")

    def tearDown(self):
        self.cand.close()

    def candidate(self, body):
        src = "import torch\nimport torch.nn as nn\n" + textwrap.dedent(body)
        self.load_reference(self.square)
        loaded, _ = self.load_candidate(src, self.square)
        self.assertEqual(loaded["type"], "loaded", loaded)
        return loaded

    def poisoned_run(self):
        case, t = self.make_case()
        poison = [{"dtype": "f32", "nbytes": 64 * 64 * 4}]
        return self.run_case(case, t, poison=poison), t

    def test_honest_candidate_reports_nothing(self):
        loaded = self.candidate("""
            class ModelNew(nn.Module):
                def forward(self, x):
                    return x * x
        """)
        self.assertEqual(loaded["integrity"], {"tampered": []})
        (reply, out), t = self.poisoned_run()
        self.assertEqual(reply["integrity"], {"inputs_changed": [], "threads_started": 0,
                                              "output_changed_after_return": False, "tampered": []})  # fmt: skip
        self.assert_bit_identical(out["out:0"], t["out:0"])

    def test_uninitialised_output_holds_the_poison(self):
        self.candidate("""
            class ModelNew(nn.Module):
                def forward(self, x):
                    return torch.empty_like(x)
        """)
        (reply, out), _ = self.poisoned_run()
        self.assertEqual(reply["type"], "outputs", reply)
        bits = out["out:0"].view(torch.int32)
        poisoned = int((bits == 0x7FC0DEAD).sum())
        # The allocator's bookkeeping may overwrite a few words at the block's start.
        self.assertGreater(poisoned, 64 * 64 // 2, poisoned)

    def test_input_mutation_and_threads_and_patches_are_reported(self):
        loaded = self.candidate("""
            import threading, time
            torch.allclose = lambda *a, **k: True

            class ModelNew(nn.Module):
                def forward(self, x):
                    y = x * x
                    x.zero_()
                    threading.Thread(target=time.sleep, args=(2,), daemon=True).start()
                    return y
        """)
        self.assertEqual(loaded["integrity"], {"tampered": ["torch.allclose"]})
        (reply, _), _ = self.poisoned_run()
        self.assertEqual(reply["integrity"]["inputs_changed"], [0])
        self.assertEqual(reply["integrity"]["threads_started"], 1)
        # The sleeping thread never touches the output.
        self.assertFalse(reply["integrity"]["output_changed_after_return"])
        self.assertEqual(reply["integrity"]["tampered"], ["torch.allclose"])

    def test_lazy_subclass_is_a_non_plain_output(self):
        self.candidate("""
            class Lazy(torch.Tensor):
                pass

            class ModelNew(nn.Module):
                def forward(self, x):
                    return (x * x).as_subclass(Lazy)
        """)
        (reply, _), _ = self.poisoned_run()
        self.assert_error(reply, "bad_output")
        self.assertEqual(reply["integrity"], "non-plain-output")

    def test_a_thread_finishing_the_output_after_return_is_seen(self):
        self.candidate("""
            import threading, time

            class ModelNew(nn.Module):
                def forward(self, x):
                    out = torch.zeros_like(x)

                    # Midway through the worker's 0.5 s grace: with 0.1 s, a worker kept
                    # off the CPU that long (tests side by side on 2 cores) took its
                    # fingerprint after the write and saw no change.
                    def late():
                        time.sleep(0.25)
                        torch.mul(x, x, out=out)

                    threading.Thread(target=late, daemon=True).start()
                    return out
        """)
        (reply, _), _ = self.poisoned_run()
        self.assertEqual(reply["integrity"]["threads_started"], 1)
        self.assertTrue(reply["integrity"]["output_changed_after_return"])

    @unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
    def test_cuda_poison_and_profile(self):
        self.load_reference(self.square)
        src = textwrap.dedent("""
            import torch
            import torch.nn as nn

            class ModelNew(nn.Module):
                def forward(self, x):
                    return torch.empty_like(x)
        """)
        loaded, _ = self.load_candidate(src, self.square, device="cuda:0")
        self.assertEqual(loaded["type"], "loaded", loaded)
        case, t = self.make_case()
        (reply, out) = self.run_case(case, t, poison=[{"dtype": "f32", "nbytes": 64 * 64 * 4}])
        self.assertEqual(reply["type"], "outputs", reply)
        bits = out["out:0"].view(torch.int32)
        self.assertEqual(int((bits == 0x7FC0DEAD).sum()), 64 * 64)
        # The profile of a candidate that computes (empty_like launches no kernel).
        loaded, _ = self.load_candidate(src.replace("torch.empty_like(x)", "x * x"), self.square, device="cuda:0")
        self.assertEqual(loaded["type"], "loaded", loaded)
        (reply, _) = self.run_case(case, t)
        self.assertEqual(reply["type"], "outputs", reply)
        reply, _ = self.cand.call({"cmd": "profile", "forward_seed": 0})
        self.assertEqual(reply["type"], "profile", reply)
        self.assertEqual(reply["default_stream"], 7)
        names = [k["name"] for k in reply["kernels"]]
        self.assertTrue(any("elementwise" in n or "mul" in n.lower() for n in names), names)
        self.assertTrue(all(k["us"] >= 0 and k["stream"] is not None for k in reply["kernels"]), reply)


class CpuHeapTests(unittest.TestCase):
    """cpu_heap.poison_heap in this process: torch's next CPU allocation of the size gets a
    poisoned block, on a heap fragmented by a thousand freed tensors of many sizes. Outputs
    of a few dozen bytes are left out: a heap can hold more free chunks that fit them than
    poison_heap takes (its _MAX_BLOCKS), and such an output then gets one never poisoned."""

    def test_next_allocation_of_the_size_is_poisoned(self):
        from kbench_worker import cpu_heap

        if cpu_heap._libc() is None:
            self.skipTest("not glibc 2.33 or later: CPU poisoning is best effort")
        cpu_heap.reuse_freed_blocks()
        junk = [torch.empty(i * 37 + 5) for i in range(3000)]
        del junk[::3]
        for n in (1000, 4096, 16384, 100_000, 1 << 20):
            blocks = cpu_heap.poison_heap(n, 0x7FC0DEAD, torch.int32)
            self.assertTrue(blocks, n)
            cpu_heap.free_blocks(blocks)
            out = torch.empty(n // 4, dtype=torch.float32)
            share = float((out.view(torch.int32) == 0x7FC0DEAD).float().mean())
            self.assertGreater(share, 0.9, f"{n} bytes: {share:.3f} of the output poisoned")
            del out
        self.assertIsNone(cpu_heap.poison_heap(cpu_heap.MMAP_THRESHOLD, 0x7FC0DEAD, torch.int32))
