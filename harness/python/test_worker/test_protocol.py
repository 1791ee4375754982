"""Start-up, the hello, the reference role's commands, exit codes and broken channels."""

import json
import os
import struct
import tempfile
import unittest

import torch

from .support import LINEAR_PROBLEM, PYTHON, Worker, WorkerTestCase


class PriorityTests(unittest.TestCase):
    def niceness(self, env_extra):
        w = Worker("candidate", env=dict(os.environ, **env_extra))
        try:
            hello, _ = w.recv()
            self.assertEqual(hello["type"], "hello")
            with open(f"/proc/{w.proc.pid}/stat") as f:
                # Field 19 (1-based) after the command name, which is in parentheses.
                return int(f.read().rsplit(")", 1)[1].split()[16])
        finally:
            self.assertEqual(w.close(), 0)

    @unittest.skipUnless(os.path.exists("/proc/self/stat"), "needs /proc")
    def test_build_jobs_run_at_the_niceness_they_are_given(self):
        base = os.nice(0)
        self.assertEqual(self.niceness({"KBENCH_NICE": "7"}), min(base + 7, 19))
        self.assertEqual(self.niceness({}), base)


class KeepCachedTests(unittest.TestCase):
    """What free GPU memory a worker keeps cached between commands, and
    KBENCH_KEEP_CACHED_BYTES's fixed bound in place of that rule."""

    def test_the_bound_is_whole_bytes_or_unset(self):
        from kbench_worker.session import keep_cached_bytes

        self.assertIsNone(keep_cached_bytes(None))
        self.assertIsNone(keep_cached_bytes(""))
        self.assertEqual(keep_cached_bytes("0"), 0)
        self.assertEqual(keep_cached_bytes("8589934592"), 8 << 30)
        for bad in ("8GiB", "-1", "1e9", " 1", "\u00b2"):
            with self.assertRaises(ValueError) as caught:
                keep_cached_bytes(bad)
            self.assertIn("KBENCH_KEEP_CACHED_BYTES", str(caught.exception))

    def test_the_reference_keeps_blocks_while_the_gpu_has_room_for_them(self):
        from kbench_worker.session import FLOOR_CACHED_BYTES, should_release

        gib = 1 << 30
        total = 140 * gib
        # Up to the floor nothing goes back, whatever is free.
        self.assertFalse(should_release(FLOOR_CACHED_BYTES, 4 * gib, 0, total, None))
        # A reference holding 36 GiB (a level-1 case with its float64 forward) on a GPU with
        # 85 GiB free keeps it: the candidate and the case's buffers fit in what is free.
        self.assertFalse(should_release(30 * gib, 36 * gib, 85 * gib, total, None))
        # With 44 GiB free (a 16 GiB case beside a candidate) it gives them back: less than
        # its reservation and an eighth of the GPU are free.
        self.assertTrue(should_release(30 * gib, 36 * gib, 44 * gib, total, None))
        self.assertTrue(should_release(30 * gib, 36 * gib, 36 * gib + total // 8 - 1, total, None))
        self.assertFalse(should_release(30 * gib, 36 * gib, 36 * gib + total // 8, total, None))
        # Without the driver's answer: given back.
        self.assertTrue(should_release(30 * gib, 36 * gib, None, None, None))
        # A fixed bound decides alone.
        self.assertTrue(should_release(gib + 1, 2 * gib, 100 * gib, total, gib))
        self.assertFalse(should_release(gib, 2 * gib, 0, total, gib))
        self.assertTrue(should_release(1, 2 * gib, None, None, 0))
        self.assertFalse(should_release(0, 2 * gib, None, None, 0))

    def test_only_the_reference_follows_the_rule_and_a_candidate_keeps_what_is_poisoned(self):
        from kbench_worker import session
        from kbench_worker.integrity import POISON_CAP_BYTES

        floor = session.FLOOR_CACHED_BYTES
        was = session.KEEP_CACHED_BYTES
        try:
            session.KEEP_CACHED_BYTES = None
            self.assertIsNone(session.fixed_bound("reference", None))
            self.assertEqual(session.fixed_bound("candidate", None), floor)
            self.assertEqual(session.fixed_bound("builder", None), floor)  # fails closed
            self.assertEqual(session.fixed_bound("reference", floor), floor)  # load, warm-up
            self.assertEqual(session.fixed_bound("candidate", 0), 0)
            self.assertEqual(session.fixed_bound("reference", 0), 0)
            # The environment's bound for both roles, a candidate's capped at the poisoning.
            session.KEEP_CACHED_BYTES = 32 << 30
            self.assertEqual(session.fixed_bound("reference", None), 32 << 30)
            self.assertEqual(session.fixed_bound("candidate", None), POISON_CAP_BYTES)
            self.assertEqual(session.fixed_bound("candidate", 0), 0)
        finally:
            session.KEEP_CACHED_BYTES = was

    def test_a_release_asks_the_driver_only_when_its_answer_decides(self):
        # _release_device_memory itself, with torch.cuda's allocator and driver calls stood
        # in for (no GPU here): which of them it makes for each role and `keep`.
        from unittest import mock

        from kbench_worker import session

        gib = 1 << 30
        calls = []

        def run(role, keep, reserved, allocated, free, total=140 * gib):
            calls.clear()
            s = session.Session(role, None)
            s.device = torch.device("cuda", 0)
            with mock.patch.multiple(
                torch.cuda,
                memory_reserved=lambda d: reserved,
                memory_allocated=lambda d: allocated,
                mem_get_info=lambda d: calls.append("mem_info") or (free, total),
                empty_cache=lambda: calls.append("empty_cache"),
            ):
                s._release_device_memory(keep)
            return list(calls)

        was = session.KEEP_CACHED_BYTES
        try:
            session.KEEP_CACHED_BYTES = None
            # The reference: kept with room, given back without, the driver not asked below
            # the floor; keep=0 (timing, partial exports, drops) always gives back.
            self.assertEqual(run("reference", None, 36 * gib, 6 * gib, 90 * gib), ["mem_info"])
            self.assertEqual(run("reference", None, 36 * gib, 6 * gib, 40 * gib), ["mem_info", "empty_cache"])
            self.assertEqual(run("reference", None, 4 * gib, 3 * gib, 0), [])
            self.assertEqual(run("reference", 0, 36 * gib, 6 * gib, 130 * gib), ["empty_cache"])
            self.assertEqual(run("reference", session.FLOOR_CACHED_BYTES, 36 * gib, 6 * gib, 130 * gib),
                             ["empty_cache"])
            # A candidate keeps the floor however much is free.
            self.assertEqual(run("candidate", None, 4 * gib, 2 * gib, 130 * gib), ["empty_cache"])
            self.assertEqual(run("candidate", None, 4 * gib, 3 * gib, 130 * gib), [])
        finally:
            session.KEEP_CACHED_BYTES = was

    def test_a_worker_takes_the_bound_from_its_environment(self):
        # Real worker processes: one starts with a good value; a bad value stops one before
        # its hello, with a message that names the variable and the value.
        w = Worker("reference", env=dict(os.environ, KBENCH_KEEP_CACHED_BYTES="123"))
        try:
            hello, _ = w.recv()
            self.assertEqual(hello["type"], "hello")
        finally:
            self.assertEqual(w.close(), 0)
        w = Worker("reference", env=dict(os.environ, KBENCH_KEEP_CACHED_BYTES="lots"))
        with self.assertRaises(EOFError):
            w.recv()
        try:
            self.assertNotEqual(w.wait(), 0)
            self.assertIn("KBENCH_KEEP_CACHED_BYTES='lots'", w.stderr_text())
        finally:
            w.close()


class DriverSplitTests(unittest.TestCase):
    """KBENCH_WORKER_TRACE's driver steps: counted per command, written in the line that
    bench/throughput/worker_trace.py reads."""

    def setUp(self):
        from kbench_worker import protocol

        self.protocol = protocol
        self.was = protocol.TRACE
        protocol.TRACE = True
        protocol.DRIVER_SPLIT.clear()

    def tearDown(self):
        self.protocol.TRACE = self.was
        self.protocol.DRIVER_SPLIT.clear()

    def test_steps_are_counted_and_read_back_by_worker_trace(self):
        import importlib.util

        p = self.protocol
        for _ in range(2):
            with p.driver_step("ipc_open"):
                pass
        with self.assertRaises(ValueError):
            with p.driver_step("gc"):
                raise ValueError("a failing step still counts")
        line = p.driver_split_line("reference", "export")
        self.assertIsNone(p.driver_split_line("reference", "export"), "reset after the line")
        path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench", "throughput", "worker_trace.py")
        spec = importlib.util.spec_from_file_location("worker_trace", path)
        worker_trace = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(worker_trace)
        with tempfile.TemporaryDirectory() as run:
            os.mkdir(os.path.join(run, "logs"))
            with open(os.path.join(run, "logs", "p__reference.log"), "w") as f:
                f.write("kbench worker: reference export 100.000 +0.010s\n" + line + "\n")
            read = worker_trace.read_run(run)
        self.assertEqual(read["driver"][("reference", "export", "ipc_open")][0], 2)
        self.assertEqual(read["driver"][("reference", "export", "gc")][0], 1)
        self.assertEqual(read["totals"], {("reference", "export"): [1, 0.01]})

    def test_nothing_is_counted_without_the_trace(self):
        self.protocol.TRACE = False
        with self.protocol.driver_step("sync"):
            pass
        self.assertIsNone(self.protocol.driver_split_line("candidate", "run_case"))


class HelloAndReferenceTests(WorkerTestCase):
    def test_hello(self):
        for hello, role in ((self.ref_hello, "reference"), (self.cand_hello, "candidate")):
            self.assertEqual(hello["type"], "hello")
            self.assertEqual(hello["magic"], "kbench-worker")
            self.assertEqual(hello["protocol"], 2)
            self.assertEqual(hello["role"], role)
            self.assertEqual(hello["torch"], torch.__version__)
            self.assertIsInstance(hello["pid"], int)
            self.assertRegex(hello["python"], r"^\d+\.\d+\.\d+")
            self.assertIsInstance(hello["cuda_available"], bool)
            self.assertIsInstance(hello["device_count"], int)

    def test_load_and_make_case(self):
        loaded = self.load_reference(self.linear)
        self.assertTrue(loaded["f64_available"], loaded)
        self.assertIsNone(loaded["f64_error"])
        self.assertIsNone(loaded["l2_bytes"])
        self.assertEqual(loaded["torch"], torch.__version__)
        reply, t = self.make_case()
        self.assertEqual(reply["inputs"], [{"tensor": "in:0"}])
        self.assertEqual((reply["outputs"], reply["outputs_f64"]), (1, 1))
        self.assertGreaterEqual(reply["run_s"], 0)
        self.assertNotIn("f64_error", reply)
        self.assertEqual(set(t), {"in:0", "out:0", "out64:0"})
        self.assertEqual((t["in:0"].dtype, list(t["in:0"].shape)), (torch.float32, [4, 16]))
        self.assertEqual((t["out:0"].dtype, list(t["out:0"].shape)), (torch.float32, [4, 8]))
        self.assertEqual((t["out64:0"].dtype, list(t["out64:0"].shape)), (torch.float64, [4, 8]))
        # randn inputs: some negative values, so the seed really drove torch.randn.
        self.assertTrue((t["in:0"] < 0).any())
        torch.testing.assert_close(t["out:0"].double(), t["out64:0"], atol=1e-5, rtol=1e-5)
        # What the reference computed is what this process computes from the same seeds.
        torch.manual_seed(42)
        model = torch.nn.Linear(16, 8)
        self.assert_bit_identical(torch.relu(model(t["in:0"])).detach(), t["out:0"])

    def test_same_seed_same_case(self):
        self.load_reference(self.linear)
        a, ta = self.make_case(seed=123, forward_seed=5)
        b, tb = self.make_case(seed=123, forward_seed=5)
        _, tc = self.make_case(seed=124, forward_seed=5)
        self.assertEqual(a["inputs"], b["inputs"])
        for name in ("in:0", "out:0", "out64:0"):
            self.assert_bit_identical(ta[name], tb[name])
        self.assertFalse(torch.equal(ta["in:0"], tc["in:0"]))

    def test_fp16_casts_floats_only(self):
        self.load_reference(self.mixed, precision="fp16")
        reply, t = self.make_case()
        self.assertEqual(reply["inputs"], [{"tensor": "in:0"}, {"tensor": "in:1"}, {"value": 0.5}])
        self.assertEqual(t["in:0"].dtype, torch.int64)  # integer inputs are never cast
        self.assertEqual(t["in:1"].dtype, torch.float16)
        self.assertEqual((reply["outputs"], reply["outputs_f64"]), (2, 2))
        self.assertEqual(t["out:0"].dtype, torch.float16)
        self.assertEqual(t["out:1"].dtype, torch.int64)
        self.assertEqual(t["out64:0"].dtype, torch.float64)
        self.assert_bit_identical(t["out:1"], t["in:0"] * 2)

    def test_f64_forward_failure_is_reported_not_fatal(self):
        path = self.files.write("3_NoF64.py", """
            import torch
            class Model(torch.nn.Module):
                def forward(self, x):
                    if x.dtype == torch.float64:
                        raise TypeError("no float64 here")
                    return x * 2
            def get_inputs(): return [torch.rand(3)]
            def get_init_inputs(): return []
        """)
        self.assertTrue(self.load_reference(path)["f64_available"])
        reply, t = self.make_case()
        self.assertEqual((reply["outputs"], reply["outputs_f64"]), (1, 0))
        self.assertIn("no float64 here", reply["f64_error"])
        self.assertEqual(set(t), {"in:0", "out:0"})

    def test_f64_copy_failure_is_reported_at_load(self):
        path = self.files.write("4_NoCopy.py", """
            import torch
            class Model(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    self.gen = (i for i in range(3))  # deepcopy cannot copy a generator
                def forward(self, x):
                    return x + 1
            def get_inputs(): return [torch.rand(3)]
            def get_init_inputs(): return []
        """)
        loaded = self.load_reference(path)
        self.assertFalse(loaded["f64_available"])
        self.assertIn("generator", loaded["f64_error"])
        reply, _ = self.make_case()
        self.assertEqual(reply["outputs_f64"], 0)

    def test_a_load_sent_ahead_waits_for_proceed_before_its_device_work(self):
        path = self.files.write("5_Marks.py", """
            import os, torch
            class Model(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    open(os.environ["KBENCH_TEST_MARK"] + ".built", "w").close()
                    self.w = torch.nn.Parameter(torch.ones(3))
                def _apply(self, fn, *args, **kwargs):  # what .to(device) and .to(dtype) call
                    open(os.environ["KBENCH_TEST_MARK"] + ".moved", "w").close()
                    return super()._apply(fn, *args, **kwargs)
                def forward(self, x):
                    return x * self.w
            def get_inputs(): return [torch.rand(3)]
            def get_init_inputs(): return []
        """)
        mark = os.path.join(self.files.dir.name, "mark")
        built, moved = mark + ".built", mark + ".moved"
        w = Worker("reference", env={**os.environ, "KBENCH_TEST_MARK": mark})
        self.addCleanup(w.close)
        self.assertEqual(w.recv()[0]["type"], "hello")
        load = {"cmd": "load", "id": 7, "problem_path": path, "device": "cpu", "want_f64": True,
                "gate_device_work": True}  # fmt: skip
        # The model is built on the host first; its device work then waits for proceed.
        notice, _ = w.call(load)
        self.assertEqual(notice, {"type": "device_work", "id": 7})
        self.assertTrue(os.path.exists(built))
        self.assertFalse(os.path.exists(moved), "moved before proceed")
        reply, _ = w.call({"cmd": "proceed", "id": 7})
        self.assertEqual((reply["type"], reply["id"], reply["f64_available"]), ("loaded", 7, True), reply)
        self.assertTrue(os.path.exists(moved))
        # Anything but proceed for that load is a protocol error answering the load, and the
        # worker goes on.
        os.remove(moved)
        notice, _ = w.call({**load, "id": 8})
        self.assertEqual(notice["type"], "device_work")
        reply, _ = w.call({"cmd": "make_case", "id": 99})
        self.assertEqual((reply["type"], reply["kind"], reply["id"]), ("error", "protocol", 8), reply)
        self.assertIn("expected proceed", reply["message"])
        self.assertFalse(os.path.exists(moved), "moved without proceed")
        # Without the field, no notice: the load answers at once.
        reply, _ = w.call({**load, "id": 9, "gate_device_work": False})
        self.assertEqual((reply["type"], reply["id"]), ("loaded", 9), reply)

    def test_inputs_are_sent_as_they_were_before_the_forward(self):
        path = self.files.write("6_InPlace.py", """
            import torch
            class Model(torch.nn.Module):
                def forward(self, x):
                    return x.mul_(2)  # writes to its input
            def get_inputs(): return [torch.rand(5)]
            def get_init_inputs(): return []
        """)
        self.load_reference(path)
        _, t = self.make_case()
        self.assert_bit_identical(t["out:0"], t["in:0"] * 2)
        self.assert_bit_identical(t["out64:0"], t["in:0"].double() * 2)

    def test_reference_never_loads_candidate_code(self):
        reply, _ = self.ref.call({"cmd": "load", "problem_path": self.linear, "candidate_path": self.linear})
        self.assert_error(reply, "protocol", "load")
        reply, _ = self.ref.call({"cmd": "run_case", "forward_seed": 0, "inputs": []})
        self.assert_error(reply, "protocol")

    def test_bad_commands_are_errors_and_the_loop_goes_on(self):
        reply, _ = self.ref.call({"cmd": "frobnicate"})
        self.assert_error(reply, "protocol")
        reply, _ = self.ref.call({"cmd": "make_case", "seed": "x", "forward_seed": 1})
        self.assert_error(reply, "protocol")
        reply, _ = self.ref.call({"cmd": "load", "problem_path": self.linear, "precision": "fp8"})
        self.assert_error(reply, "protocol", "load")
        self.load_reference(self.linear)
        self.make_case()

    def test_a_field_outside_the_command_table_or_a_missing_one_is_refused_by_name(self):
        # The table the harness's command enum is checked against (`COMMANDS`): a field
        # renamed on one side only is an error naming it, never silently ignored.
        self.load_reference(self.linear)
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 1, "trials": 5})
        self.assert_error(reply, "protocol")
        self.assertIn("'trials'", reply["message"])
        reply, _ = self.ref.call({"cmd": "make_case", "forward_seed": 1})
        self.assert_error(reply, "protocol")
        self.assertIn("missing field(s) 'seed'", reply["message"])
        self.make_case()

    def test_problem_printing_does_not_corrupt_the_channel(self):
        path = self.files.write("5_Chatty.py", LINEAR_PROBLEM + "\nprint('KBF1 hello from the problem')\n")
        self.load_reference(path)
        self.make_case()
        self.assertIn("KBF1 hello from the problem", self.ref.stderr_text())


class ProcessTests(unittest.TestCase):
    """Exit codes and broken channels; each test starts its own worker."""

    def test_bad_magic_exits_4(self):
        w = Worker("candidate")
        w.recv()
        w.send_raw(b"XXXX" + bytes(12))
        reply, _ = w.recv()
        self.assertEqual((reply["type"], reply["kind"]), ("error", "protocol"))
        self.assertEqual(w.wait(), 4)
        w.close()

    def test_tensor_outside_payload_exits_4(self):
        w = Worker("reference")
        w.recv()
        header = json.dumps({"cmd": "run_case"}).encode()
        index = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
        payload = len(index).to_bytes(8, "little") + index + bytes(8)
        w.send_raw(b"KBF1" + struct.pack("<IQ", len(header), len(payload)) + header + payload)
        reply, _ = w.recv()
        self.assertIn("the payload", reply["message"])
        self.assertEqual(w.wait(), 4)
        w.close()

    def test_missing_torch_is_environment_error_exit_3(self):
        with tempfile.TemporaryDirectory() as fake:
            with open(os.path.join(fake, "torch.py"), "w") as f:
                f.write("raise ImportError('libtorch is broken')\n")
            env = dict(os.environ, PYTHONPATH=fake)
            w = Worker("candidate", env=env)
            reply, _ = w.recv()
            self.assertEqual((reply["type"], reply["kind"]), ("error", "environment"))
            self.assertIn("libtorch is broken", reply["message"])
            self.assertEqual(reply["python_executable"], PYTHON)
            self.assertEqual(w.wait(), 3)
            w.close()

    def test_closed_channel_exits_0(self):
        w = Worker("reference")
        w.recv()
        w.proc.stdin.close()
        self.assertEqual(w.wait(), 0)
        w.proc.stdout.close()
        w.stderr.close()

    def test_usage_error_exits_2(self):
        w = Worker("", args=["judge"])
        reply, _ = w.recv()
        self.assertEqual(reply["kind"], "protocol")
        self.assertEqual(w.wait(), 2)
        w.close()


class SafetensorsCodecTests(unittest.TestCase):
    """The worker's safetensors writer and reader (protocol.py), checked against the
    safetensors package."""

    @classmethod
    def setUpClass(cls):
        from kbench_worker.tensors import _init_dtype_tables

        _init_dtype_tables()  # the worker fills them once torch is imported

    TENSORS = [
        ("out:0", torch.randn(3, 4)),
        ("out:1", torch.tensor([True, False, True])),
        ("out:2", torch.randn(2, 2, dtype=torch.float64)),
        ("out:3", torch.randn(5).to(torch.bfloat16)),
        ("out:10", torch.tensor(7, dtype=torch.int64)),
        ("out:11", torch.empty(0, 3, dtype=torch.float16)),
        ("in:0", torch.arange(-4, 4, dtype=torch.int8)),
    ]

    def test_writer_output_is_read_by_the_package(self):
        import safetensors.torch

        from kbench_worker.protocol import Channel

        buffers = Channel.encode({"type": "outputs"}, self.TENSORS)
        frame = b"".join(bytes(b) for b in buffers)
        header_len, payload_len = struct.unpack("<IQ", frame[4:16])
        payload = frame[16 + header_len :]
        self.assertEqual(len(payload), payload_len)
        self.assertEqual(int.from_bytes(payload[:8], "little") % 8, 0, "header padded to 8")
        got = safetensors.torch.load(payload)
        self.assertEqual(set(got), {n for n, _ in self.TENSORS})
        for name, t in self.TENSORS:
            self.assertEqual(got[name].dtype, t.dtype, name)
            self.assertTrue(torch.equal(got[name], t), name)

    def test_reader_takes_what_the_package_writes(self):
        from kbench_worker.protocol import _read_safetensors_index
        from kbench_worker.tensors import _tensor_from_payload

        from .support import encode_payload

        for pad in (0, 3):
            payload = bytearray(encode_payload(self.TENSORS, pad))
            specs = {s["name"]: s for s in _read_safetensors_index(payload)}
            self.assertEqual(set(specs), {n for n, _ in self.TENSORS})
            for name, t in self.TENSORS:
                back = _tensor_from_payload(payload, specs[name], "cpu")
                self.assertTrue(torch.equal(back, t), (name, pad))

    def test_malformed_payloads_are_protocol_violations(self):
        import random

        from kbench_worker.protocol import ProtocolViolation, _read_safetensors_index

        from .support import encode_payload

        good = encode_payload(self.TENSORS[:3])
        rng = random.Random(5)
        outcomes = {"ok": 0, "violation": 0}
        for _ in range(3000):
            p = bytearray(good)
            for _ in range(rng.randrange(1, 4)):
                what = rng.randrange(3)
                if what == 0 and p:
                    p[rng.randrange(len(p))] ^= rng.randrange(1, 256)
                elif what == 1:
                    del p[rng.randrange(len(p) + 1) :]
                else:
                    p += bytes(rng.randrange(1, 9))
            try:
                specs = _read_safetensors_index(p)
            except ProtocolViolation:
                outcomes["violation"] += 1
                continue
            outcomes["ok"] += 1
            for s in specs:
                self.assertLessEqual(s["offset"] + s["nbytes"], len(p))
        self.assertGreater(outcomes["violation"], 1000, outcomes)
        for bad in (b"\x01", (10**9).to_bytes(8, "little") + b"{}", (2).to_bytes(8, "little") + b"[]"):
            with self.assertRaises(ProtocolViolation):
                _read_safetensors_index(bytearray(bad))
