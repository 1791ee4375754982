"""Timing (PROTOCOL.md, "Timing"): the phase's buffers on the host, fresh inputs drawn by the
reference, one call at a time, outputs into the slots, the captured clocks."""

import mmap
import os
import tempfile
import textwrap

import torch

from .support import WIRE, WIRE_OF, Worker, WorkerTestCase, as_candidate, simple_problem


def _read(path):
    with open(path) as f:
        return f.read()


class HostPhase:
    """The buffers of one timing phase on the host, as the harness lays them out: one file
    with (for the reference) `sets` source sets, the staged inputs, the output slots."""

    def __init__(self, inputs, outputs, source=True, sets=1):
        self.file = tempfile.NamedTemporaryFile(prefix="kbench-exchange-test-")
        end = 0

        def place(layouts):
            nonlocal end
            specs = []
            for dtype, shape in layouts:
                off = -(-end // 64) * 64
                n = torch.empty(shape, dtype=WIRE[dtype]).numel() * torch.empty((), dtype=WIRE[dtype]).element_size()
                specs.append({"offset": off, "dtype": dtype, "shape": list(shape), "nbytes": n})
                end = off + n
            return specs

        self.source = [place(inputs) for _ in range(sets)] if source else None
        self.staged = place(inputs)
        self.outputs = place(outputs)
        self.file.truncate(-(-end // 64) * 64 or 64)
        self.file.flush()

    def open_cmd(self, args, forward_seed=11):
        cmd = {"cmd": "time_open", "args": args, "staged": self.staged, "outputs": self.outputs,
               "forward_seed": forward_seed, "exchange": {"path": self.file.name}}  # fmt: skip
        if self.source is not None:
            cmd["source"] = self.source
        return cmd

    def _view(self, spec):
        with open(self.file.name, "rb") as f:
            f.seek(spec["offset"])
            data = bytearray(f.read(spec["nbytes"]))
        return torch.frombuffer(data, dtype=WIRE[spec["dtype"]]).reshape(spec["shape"]).clone()

    def write(self, spec, t):
        with open(self.file.name, "r+b") as f:
            f.seek(spec["offset"])
            f.write(t.contiguous().view(torch.uint8).numpy().tobytes())

    def source_tensor(self, i, set=0):
        return self._view(self.source[set][i])

    def staged_tensor(self, i):
        return self._view(self.staged[i])

    def output(self, k):
        return self._view(self.outputs[k])

    def poison(self):
        for s in self.outputs:
            self.write(s, torch.full((s["nbytes"],), 0xFF, dtype=torch.uint8))

    def stage_from(self, other, set=0):
        """The harness's copy of `other`'s source set `set` into this side's staged inputs."""
        for i, s in enumerate(self.staged):
            self.write(s, other.source_tensor(i, set))


class TimingTests(WorkerTestCase):
    def setUp(self):
        # A candidate worker of its own per test, as the harness starts one per candidate.
        self.cand = Worker("candidate")
        hello, _ = self.cand.recv()
        self.assertEqual(hello["type"], "hello")

    def tearDown(self):
        self.cand.close()

    def phases(self, case, sets=1):
        """Reference and candidate phases shaped like `case` (a make_case reply and tensors),
        the reference's with `sets` source sets."""
        reply, t = case
        inputs = [(WIRE_OF[t[a["tensor"]].dtype], list(t[a["tensor"]].shape)) for a in reply["inputs"] if "tensor" in a]
        outputs = [(WIRE_OF[t[f"out:{k}"].dtype], list(t[f"out:{k}"].shape)) for k in range(reply["outputs"])]
        args, j = [], 0
        for a in reply["inputs"]:
            if "tensor" in a:
                args.append({"staged": j})
                j += 1
            else:
                args.append(a)
        return HostPhase(inputs, outputs, sets=sets), HostPhase(inputs, outputs, source=False), args

    def open_both(self, problem, candidate_source, sets=1):
        self.load_reference(problem)
        loaded, _ = self.load_candidate(candidate_source, problem)
        self.assertEqual(loaded["type"], "loaded", loaded)
        case = self.make_case()
        ran, _ = self.run_case(*case)
        self.assertEqual(ran["type"], "outputs", ran)
        ref, cand, args = self.phases(case, sets)
        for w, p in ((self.ref, ref), (self.cand, cand)):
            reply, _ = w.call(p.open_cmd(args))
            self.assertEqual(reply["type"], "time_opened", reply)
            # The thread that runs the timed calls: the worker's main thread, which has the
            # process's id (no pid namespace here).
            self.assertEqual(reply["tid"], w.proc.pid, reply)
        return ref, cand, case

    def call_both(self, ref, cand, seed):
        staged, _ = self.ref.call({"cmd": "stage_inputs", "seeds": [seed]})
        self.assertEqual(staged["type"], "staged", staged)
        ref.poison()
        cand.poison()
        ref.stage_from(ref)
        cand.stage_from(ref)
        r, _ = self.ref.call({"cmd": "timed_call"})
        c, _ = self.cand.call({"cmd": "timed_call"})
        return r, c

    def test_fresh_inputs_are_drawn_as_cases_are_and_outputs_land_in_the_slots(self):
        ref, cand, case = self.open_both(self.mixed, as_candidate(_read(self.mixed)))
        r, c = self.call_both(ref, cand, seed=123)
        for reply in (r, c):
            self.assertEqual(reply["type"], "timed_call", reply)
            self.assertEqual(reply["clock"], "perf_counter")
            self.assertGreater(reply["sample_ms"], 0)
            self.assertEqual([o["copied"] for o in reply["outputs"]], [True, True])
            self.assertEqual(reply["integrity"], {"tampered": []})
        # The draw is the random family's case of that seed.
        made, t = self.make_case(seed=123)
        self.assert_bit_identical(ref.source_tensor(0), t["in:0"])
        self.assert_bit_identical(ref.source_tensor(1), t["in:1"])
        for k in range(2):
            self.assert_bit_identical(cand.output(k), t[f"out:{k}"])
            self.assert_bit_identical(ref.output(k), t[f"out:{k}"])
        # Another seed, other values.
        self.call_both(ref, cand, seed=124)
        self.assertFalse(torch.equal(ref.source_tensor(1), t["in:1"]))
        closed, _ = self.cand.call({"cmd": "time_close"})
        self.assertEqual(closed["type"], "time_closed", closed)
        reply, _ = self.cand.call({"cmd": "timed_call"})
        self.assert_error(reply, "protocol", "time")

    def test_closing_a_phase_keeps_the_loads_objects_out_of_later_collections(self):
        # The load freezes torch and the model out of every later collection; a phase thaws
        # its own objects to collect them, and must freeze what is left again: otherwise
        # each collection of the stress cases after timing scans all of torch (0.12 s each,
        # 4.6 s a problem on an H200's host). torch alone is far above 10^4 objects.
        ref, cand, _ = self.open_both(self.linear, as_candidate(_read(self.linear)))
        self.call_both(ref, cand, seed=5)
        for w in (self.ref, self.cand):
            closed, _ = w.call({"cmd": "time_close"})
            self.assertEqual(closed["type"], "time_closed", closed)
            self.assertGreater(closed["frozen_objects"], 10_000, closed)

    def test_only_the_reference_draws_and_a_phase_comes_first(self):
        reply, _ = self.cand.call({"cmd": "timed_call"})
        self.assert_error(reply, "protocol", "time")
        ref, cand, _ = self.open_both(self.linear, as_candidate(_read(self.linear)))
        reply, _ = self.cand.call({"cmd": "stage_inputs", "seeds": [1]})
        self.assert_error(reply, "protocol", "time")

    def test_calls_drawn_ahead_fill_one_source_set_each(self):
        ref, cand, _ = self.open_both(self.mixed, as_candidate(_read(self.mixed)), sets=3)
        staged, _ = self.ref.call({"cmd": "stage_inputs", "seeds": [201, 202]})
        self.assertEqual(staged["type"], "staged", staged)
        for j, seed in enumerate((201, 202)):
            _, t = self.make_case(seed=seed)
            self.assert_bit_identical(ref.source_tensor(0, j), t["in:0"])
            self.assert_bit_identical(ref.source_tensor(1, j), t["in:1"])
        # The set not drawn into is untouched (zeros), and a call on set 1 gets seed 202's values.
        self.assertEqual(int(ref.source_tensor(1, 2).abs().sum()), 0)
        cand.poison()
        cand.stage_from(ref, 1)
        c, _ = self.cand.call({"cmd": "timed_call"})
        self.assertEqual(c["type"], "timed_call", c)
        _, t = self.make_case(seed=202)
        for k in range(2):
            self.assert_bit_identical(cand.output(k), t[f"out:{k}"])
        # More seeds than sets, none, or a seed that is not a count: refused.
        for seeds in ([1, 2, 3, 4], [], [1, -2], 5):
            reply, _ = self.ref.call({"cmd": "stage_inputs", "seeds": seeds})
            self.assert_error(reply, "protocol", "time")

    def test_inputs_whose_shape_follows_the_seed_cannot_be_drawn_fresh(self):
        problem = self.files.write("30_Ragged.py", simple_problem(
            "x * 2", "[torch.rand(int(torch.randint(2, 9, (1,))), 4)]"))
        self.load_reference(problem)
        made = self.make_case(seed=1)
        ref, _, args = self.phases(made)
        reply, _ = self.ref.call(ref.open_cmd(args))
        self.assertEqual(reply["type"], "time_opened", reply)
        seeds = [s for s in range(2, 40)]
        errors = [self.ref.call({"cmd": "stage_inputs", "seeds": [s]})[0] for s in seeds]
        failed = [e for e in errors if e["type"] == "error"]
        self.assertTrue(failed, "some seed draws another shape")
        self.assertIn("change with the seed", failed[0]["message"])

    def test_a_wrong_output_is_described_not_copied(self):
        ref, cand, _ = self.open_both(self.linear, textwrap.dedent("""
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    super().__init__()
                def forward(self, x):
                    return x[:, :3] * 2
        """))
        r, c = self.call_both(ref, cand, seed=5)
        self.assertEqual(c["type"], "timed_call", c)
        self.assertEqual(c["outputs"], [{"dtype": "f32", "shape": [4, 3], "device": "cpu", "copied": False}])
        # The slot keeps its fill.
        self.assertTrue(torch.isnan(cand.output(0)).all())

    def test_a_patched_clock_changes_no_sample_and_is_named(self):
        ref, cand, _ = self.open_both(self.linear, as_candidate(_read(self.linear)) + textwrap.dedent("""
            import time
            _real = time.perf_counter_ns
            time.perf_counter_ns = lambda: _real() // 1000
            _fwd = ModelNew.forward
            def forward(self, x):
                time.sleep(0.002)
                return _fwd(self, x)
            ModelNew.forward = forward
        """))
        r, c = self.call_both(ref, cand, seed=5)
        self.assertGreaterEqual(c["sample_ms"], 1.9, c)
        self.assertEqual(c["integrity"]["tampered"], ["time.perf_counter_ns"])

    def test_every_call_starts_from_the_cases_random_state(self):
        # Training-mode dropout: a timed call on the case's own inputs gives the case's
        # outputs, so the reference's and the candidate's calls on the same inputs agree.
        problem = self.files.write("31_Dropout.py", simple_problem(
            "(torch.nn.functional.dropout(x, 0.5, True), torch.rand(4))"))
        ref, cand, case = self.open_both(problem, as_candidate(_read(problem)))
        for seed in (7, 7, 8):
            r, c = self.call_both(ref, cand, seed)
            for k in range(2):
                self.assert_bit_identical(cand.output(k), ref.output(k))
        made, t = self.make_case(seed=7, forward_seed=11)
        self.call_both(ref, cand, 7)
        self.assert_bit_identical(cand.output(0), t["out:0"])

    def test_a_calls_outputs_die_with_it(self):
        # Each call returns how many of its earlier outputs are still alive: none may be (a
        # reference cycle in the worker kept every output of the phase alive on a GPU).
        ref, cand, _ = self.open_both(self.linear, textwrap.dedent("""
            import weakref
            import torch
            outs = []

            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    super().__init__()
                def forward(self, x):
                    alive = sum(r() is not None for r in outs)
                    out = (x[:, :1] * 0 + alive).expand(4, 8).contiguous()
                    outs.append(weakref.ref(out))
                    return out
        """))
        for seed in range(5):
            r, c = self.call_both(ref, cand, seed)
            self.assertEqual(c["type"], "timed_call", c)
            self.assertEqual(float(cand.output(0).max()), 0.0, f"call {seed}: earlier outputs alive")

    def test_opening_calls_run_on_the_workers_own_case(self):
        ref, cand, _ = self.open_both(self.linear, as_candidate(_read(self.linear)))
        reply, _ = self.cand.call({"cmd": "timed_call", "round_warmup": 2})
        self.assertEqual(reply, {"type": "opened", "calls": 2, "id": reply["id"]})
        reply, _ = self.cand.call({"cmd": "timed_call", "round_warmup": -1})
        self.assert_error(reply, "protocol", "time")

    def test_a_raising_call_is_a_runtime_error_of_timing(self):
        ref, cand, _ = self.open_both(self.linear, as_candidate(_read(self.linear)) + textwrap.dedent("""
            calls = [0]
            _fwd = ModelNew.forward
            def forward(self, x):
                calls[0] += 1
                if calls[0] > 1:
                    raise RuntimeError("kernel exploded")
                return _fwd(self, x)
            ModelNew.forward = forward
        """))
        r, c = self.call_both(ref, cand, seed=5)
        self.assert_error(c, "runtime_error", "time")
        self.assertIn("kernel exploded", c["message"])

    def test_an_exchange_file_that_does_not_hold_the_specs_is_refused(self):
        self.load_reference(self.linear)
        p = HostPhase([("f32", [4, 16])], [("f32", [4, 8])])
        cmd = p.open_cmd([{"staged": 0}])
        cmd["staged"][0]["offset"] = 1 << 30
        reply, _ = self.ref.call(cmd)
        self.assert_error(reply, "protocol", "time")
        self.assertIn("does not fit", reply["message"])

    def test_placements_in_turn_are_for_a_gpu_and_a_set_must_exist(self):
        # Staged sets used in turn and held outputs spread a GPU's calls over placements; on
        # the host there is one file, and asking for them is the harness's mistake.
        self.load_reference(self.linear)
        p = HostPhase([("f32", [4, 16])], [("f32", [4, 8])])
        for extra in ({"staged_sets": [p.staged]}, {"hold_outputs": 2}):
            with self.subTest(extra=extra):
                reply, _ = self.ref.call({**p.open_cmd([{"staged": 0}]), **extra})
                self.assert_error(reply, "protocol", "time")
                self.assertIn("CUDA phase", reply["message"])
        ref, cand, _ = self.open_both(self.linear, as_candidate(_read(self.linear)))
        staged, _ = self.ref.call({"cmd": "stage_inputs", "seeds": [3]})
        self.assertEqual(staged["type"], "staged", staged)
        reply, _ = self.cand.call({"cmd": "timed_call", "staged_set": 1})
        self.assert_error(reply, "protocol", "time")
        self.assertIn("staged_set must be below 1", reply["message"])
        reply, _ = self.cand.call({"cmd": "timed_call", "staged_set": 0})
        self.assertEqual(reply["type"], "timed_call", reply)
