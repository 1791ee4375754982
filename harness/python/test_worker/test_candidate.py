"""The candidate role: loading candidate code (its errors), running and timing it, and
building extensions."""

import os
import textwrap
import unittest

import torch

from .support import LINEAR_PROBLEM, MIXED_PROBLEM, WorkerTestCase, as_candidate


class CandidateTests(WorkerTestCase):
    def test_candidate_matches_reference_bit_for_bit(self):
        self.load_reference(self.linear)
        loaded, _ = self.load_candidate(as_candidate(LINEAR_PROBLEM))
        self.assertEqual(loaded["type"], "loaded", loaded)
        self.assertFalse(loaded["f64_available"])
        case, t = self.make_case(seed=3, forward_seed=9)
        # pad=1: every tensor lies at an odd payload offset.
        reply, out = self.run_case(case, t, forward_seed=9, pad=1)
        self.assertEqual(reply["type"], "outputs", reply)
        self.assertEqual(reply["outputs"], 1)
        self.assertEqual(set(out), {"out:0"})
        self.assert_bit_identical(out["out:0"], t["out:0"])

    def test_candidate_fp16_mixed_inputs_and_tuple_outputs(self):
        self.load_reference(self.mixed, precision="fp16")
        loaded, _ = self.load_candidate(as_candidate(MIXED_PROBLEM), self.mixed, precision="fp16")
        self.assertEqual(loaded["type"], "loaded", loaded)
        case, t = self.make_case()
        reply, out = self.run_case(case, t, pad=3)
        self.assertEqual(reply["outputs"], 2, reply)
        self.assert_bit_identical(out["out:0"], t["out:0"])
        self.assert_bit_identical(out["out:1"], t["out:1"])

    def test_bf16_round_trip(self):
        self.load_reference(self.linear, precision="bf16")
        loaded, _ = self.load_candidate(as_candidate(LINEAR_PROBLEM), precision="bf16")
        self.assertEqual(loaded["type"], "loaded", loaded)
        case, t = self.make_case()
        self.assertEqual(t["in:0"].dtype, torch.bfloat16)
        self.assertEqual(t["out:0"].dtype, torch.bfloat16)
        # Send the bf16 input back through an identity candidate: the bit pattern survives.
        reply, _ = self.load_candidate("""
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    super().__init__()
                def forward(self, x):
                    return x.clone()
        """, precision="bf16")
        reply, out = self.run_case(case, t, pad=1)
        self.assert_bit_identical(out["out:0"], t["in:0"])
        # A hand-made bf16 with awkward values (subnormal, inf, nan) round-trips exactly.
        special = torch.tensor([1.0, -0.0, 1e-40, float("inf"), float("nan"), 3.14159], dtype=torch.bfloat16)
        reply, out = self.cand.call({"cmd": "run_case", "forward_seed": 0, "inputs": [{"tensor": "x"}]},
                                    [("x", special)], pad=1)  # fmt: skip
        self.assert_bit_identical(out["out:0"], special)

    def test_syntax_error_is_compile_error_naming_the_file(self):
        reply, path = self.load_candidate("import torch\nclass ModelNew(torch.nn.Module)\n    pass\n")
        self.assert_error(reply, "compile_error", "load")
        self.assertIn(path, reply["message"])
        self.assertIn("SyntaxError", reply["message"])

    def test_missing_model_new_is_compile_error(self):
        reply, path = self.load_candidate("import torch\nclass Something(torch.nn.Module):\n    pass\n")
        self.assert_error(reply, "compile_error", "load")
        self.assertIn(path, reply["message"])
        self.assertIn("ModelNew", reply["message"])

    def test_import_error_is_compile_error(self):
        reply, path = self.load_candidate("import kbench_no_such_module_xyz\n")
        self.assert_error(reply, "compile_error", "load")
        self.assertIn(path, reply["message"])
        self.assertIn("ModuleNotFoundError", reply["message"])

    def test_build_failures_and_exits_while_loading_are_compile_errors(self):
        sources = {
            "import subprocess\nraise subprocess.CalledProcessError(1, ['ninja', '-v'])\n":
                "extension build failed",
            "raise RuntimeError(\"Error building extension 'k': nvcc fatal\")\n":
                "extension build failed",
            "import sys\nsys.exit(3)\n": "SystemExit",
        }  # fmt: skip
        for source, needle in sources.items():
            with self.subTest(source=source):
                reply, path = self.load_candidate(source)
                self.assert_error(reply, "compile_error", "load")
                self.assertIn(path, reply["message"])
                self.assertIn(needle, reply["message"])
                # the traceback starts in the candidate, not in the worker
                self.assertNotIn("kbench_worker", reply["traceback"])

    def test_warm_up_calls_the_model_once_at_load(self):
        counting = """
            import torch
            CALLS = []
            class ModelNew(Model):
                def forward(self, x):
                    CALLS.append(tuple(x.shape))
                    if len(CALLS) > 1:
                        raise RuntimeError(f"called {len(CALLS)} times")
                    return super().forward(x)
        """
        reply, _ = self.load_candidate(counting, warm_up=True)
        self.assertEqual(reply["type"], "loaded", reply)
        self.assertIsInstance(reply["warm_s"], float)
        # the warm-up call used up the one call this ModelNew allows
        self.load_reference(self.linear)
        case, t = self.make_case()
        reply, _ = self.run_case(case, t)
        self.assert_error(reply, "runtime_error", "run")
        self.assertIn("called 2 times", reply["message"])
        # without warm_up, no call at load
        reply, _ = self.load_candidate(counting)
        self.assertIsNone(reply["warm_s"])
        failing = """
            import torch
            class ModelNew(Model):
                def forward(self, x):
                    raise RuntimeError("inductor exploded")
        """
        reply, _ = self.load_candidate(failing, warm_up=True)
        self.assert_error(reply, "compile_error", "load")
        self.assertIn("inductor exploded", reply["message"])

    def test_constructor_failure_is_runtime_error_at_load(self):
        reply, _ = self.load_candidate("""
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    raise ValueError("bad init")
        """)
        self.assert_error(reply, "runtime_error", "load")
        self.assertIn("ValueError: bad init", reply["message"])

    def test_raising_forward_is_runtime_error(self):
        self.load_reference(self.linear)
        reply, _ = self.load_candidate("""
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    super().__init__()
                def forward(self, x):
                    raise RuntimeError("kernel exploded")
        """)
        self.assertEqual(reply["type"], "loaded", reply)
        case, t = self.make_case()
        reply, _ = self.run_case(case, t)
        self.assert_error(reply, "runtime_error", "run")
        self.assertIn("RuntimeError: kernel exploded", reply["message"])
        self.assertIn("kernel exploded", reply["traceback"])

    def test_printing_candidate_does_not_corrupt_the_protocol(self):
        self.load_reference(self.linear)
        reply, _ = self.load_candidate(as_candidate(LINEAR_PROBLEM) + textwrap.dedent("""
            import ctypes, os, sys
            print("KBF1 python print at import")
            os.write(1, b"KBF1\\xff\\xff\\xff\\xff raw fd 1 write at import\\n")
            _libc = ctypes.CDLL(None)
            _libc.printf(b"KBF1 C printf at import\\n")
            _libc.fflush(None)
            _forward = ModelNew.forward
            def _chatty_forward(self, x):
                print("KBF1 python print in forward")
                sys.__stdout__.write("KBF1 via sys.__stdout__\\n")
                sys.__stdout__.flush()
                os.write(1, b"KBF1 raw write in forward\\n")
                return _forward(self, x)
            ModelNew.forward = _chatty_forward
        """))
        self.assertEqual(reply["type"], "loaded", reply)
        case, t = self.make_case()
        reply, out = self.run_case(case, t)
        self.assertEqual(reply["type"], "outputs", reply)
        self.assert_bit_identical(out["out:0"], t["out:0"])
        err = self.cand.stderr_text()
        for text in ("python print at import", "raw fd 1 write at import", "C printf at import",
                     "python print in forward", "via sys.__stdout__", "raw write in forward"):  # fmt: skip
            self.assertIn(text, err)

    def _forward_returning(self, expr):
        return self.load_candidate(f"""
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    super().__init__()
                def forward(self, x):
                    return {expr}
        """)

    def test_bad_outputs(self):
        self.load_reference(self.linear)
        case, t = self.make_case()
        cases = {
            "None": "only None",
            "x.sum().item()": "float",
            "{'y': x}": "dict",
            "torch.nn.Parameter(x)": "Parameter",
            "x.to(torch.complex64)": "complex64",
            "x.to(torch.uint16)": "uint16",
            "(x, [x, 3])": "int",
            "x.to_sparse()": "sparse",
            "torch.empty(3, device='meta')": "meta",
        }
        for expr, needle in cases.items():
            with self.subTest(expr=expr):
                reply, _ = self._forward_returning(expr)
                self.assertEqual(reply["type"], "loaded", reply)
                reply, _ = self.run_case(case, t)
                self.assert_error(reply, "bad_output", "run")
                self.assertIn(needle, reply["message"])

    def test_nested_outputs_flatten_in_order(self):
        self.load_reference(self.linear)
        case, t = self.make_case()
        self._forward_returning("(x, [x * 2, (x.int(),)], x > 0)")
        reply, out = self.run_case(case, t)
        self.assertEqual(reply["outputs"], 4, reply)
        x = t["in:0"]
        self.assert_bit_identical(out["out:0"], x)
        self.assert_bit_identical(out["out:1"], x * 2)
        self.assert_bit_identical(out["out:2"], x.int())
        self.assert_bit_identical(out["out:3"], x > 0)

    def test_return_inputs_shows_in_place_writes(self):
        self.load_reference(self.linear)
        case, t = self.make_case()
        self._forward_returning("x.mul_(0)")
        reply, out = self.run_case(case, t, return_inputs=True)
        self.assertEqual(reply["type"], "outputs", reply)
        self.assertEqual(set(out), {"out:0", "in:0"})
        self.assertTrue(torch.equal(out["in:0"], torch.zeros_like(t["in:0"])))

    def test_candidate_sees_problem_namespace_and_dataclasses_work(self):
        self.load_reference(self.linear)
        reply, path = self.load_candidate("""
            import dataclasses, typing
            @dataclasses.dataclass
            class Config:
                scale: float = 1.0
                tags: typing.List[str] = dataclasses.field(default_factory=list)
            class ModelNew(Model):  # Model and the size constants come from the problem
                def __init__(self, *args):
                    super().__init__(*args)
                    self.cfg = Config()
                    assert in_features == 16 and __name__ == "kbench_problem"
                    assert __file__.endswith(".py")
        """)
        self.assertEqual(reply["type"], "loaded", reply)
        case, t = self.make_case()
        _, out = self.run_case(case, t)
        self.assert_bit_identical(out["out:0"], t["out:0"])

    def test_ninja_runs_say_why_they_compile_again_under_the_failure_replay(self):
        # The wrappers of torch's ninja run a candidate that names cpp_extension loads under:
        # the failure replay outside, the reasons inside it (a replayed failure runs no ninja).
        self.load_reference(self.linear)
        reply, _ = self.load_candidate("""
            import torch
            from torch.utils import cpp_extension
            chain, f = [], cpp_extension._run_ninja_build
            while f is not None:
                chain.append(float(bool(getattr(f, "_kbench_replays_failures", False))) * 2
                             + float(bool(getattr(f, "_kbench_explains", False))))
                f = getattr(f, "__wrapped__", None)
            class ModelNew(Model):
                def forward(self, x):
                    return torch.tensor(chain)
        """)
        self.assertEqual(reply["type"], "loaded", reply)
        case, t = self.make_case()
        _, out = self.run_case(case, t)
        self.assertEqual(out["out:0"].tolist(), [2.0, 1.0, 0.0])

    def test_a_traced_load_says_where_its_seconds_went(self):
        # KBENCH_WORKER_TRACE=1: the load's split (problem, cpp_extension import, candidate
        # import, construction, move, release, collection) follows its command line, so a GPU
        # run's logs show what a kernel's load spends between evaluations.
        from .support import Worker

        path = self.files.write("cand_traced.py", """
            import torch
            from torch.utils import cpp_extension
            class ModelNew(Model):
                pass
        """)
        w = Worker("candidate", env={**os.environ, "KBENCH_WORKER_TRACE": "1"})
        try:
            w.recv()
            reply, _ = w.call({"cmd": "load", "problem_path": self.linear, "candidate_path": path,
                               "device": "cpu", "precision": "fp32", "weight_seed": 42,
                               "cpu_threads": 1})  # fmt: skip
            self.assertEqual(reply["type"], "loaded", reply)
            log = w.stderr_text()
        finally:
            w.close()
        split = [line for line in log.splitlines() if "driver split (candidate load)" in line]
        self.assertEqual(len(split), 1, log)
        for part in ("load: problem 1", "load: cpp_extension import 1", "load: candidate import 1",
                     "load: construct 1", "load: move 1", "load: collect 1"):
            self.assertIn(part, split[0])

    def _first_outputs_in_own_worker(self, path, loads=1, env=None):
        """Loads the candidate at `path` `loads` times in a worker of its own (started with
        `env`) and runs one case after each load: the first element of each output."""
        from .support import Worker

        self.load_reference(self.linear)
        w = Worker("candidate", env=env)
        seen = []
        try:
            w.recv()
            for _ in range(loads):
                reply, _ = w.call({"cmd": "load", "problem_path": self.linear, "candidate_path": path,
                                   "device": "cpu", "precision": "fp32", "weight_seed": 42,
                                   "cpu_threads": 1})  # fmt: skip
                self.assertEqual(reply["type"], "loaded", reply)
                case, t = self.make_case()
                inputs = [(a["tensor"], t[a["tensor"]]) for a in case["inputs"] if "tensor" in a]
                _, out = w.call({"cmd": "run_case", "forward_seed": 11, "inputs": case["inputs"]}, inputs)
                seen.append(out["out:0"].flatten()[0].item())
        finally:
            w.close()
        return seen

    def test_the_start_is_frozen_before_a_first_load_and_thawed_for_a_second(self):
        # The worker freezes what its start made (torch's objects), so a first load's
        # collection scans only what the load made; a second load thaws the first's freeze,
        # as it always did, so the model it replaces can be collected.
        path = self.files.write("cand_frozen.py", """
            import gc
            import torch
            FROZEN = gc.get_freeze_count()
            class ModelNew(Model):
                def forward(self, x):
                    return torch.full((1,), float(FROZEN))
        """)
        frozen = self._first_outputs_in_own_worker(path, loads=2)
        self.assertGreater(frozen[0], 10_000, "the start's objects are frozen before the first load")
        self.assertEqual(frozen[1], 0, "a second load thaws the first's freeze before the candidate runs")

    def test_a_start_told_to_imports_the_extension_module_before_any_candidate_code(self):
        # KBENCH_IMPORT_CPP_EXTENSION=1 (a GPU candidate whose source names it): the start
        # imports torch's extension module, so the load (between two evaluations on a GPU)
        # does not; without it nothing is imported for a candidate that does not name it.
        # The source must not name the module: the load imports it for a source that does.
        path = self.files.write("cand_imported.py", """
            import sys
            import torch
            IMPORTED = "torch.utils.cpp_" + "extension" in sys.modules
            class ModelNew(Model):
                def forward(self, x):
                    return torch.full((1,), float(IMPORTED))
        """)
        seen = []
        for told in (True, False):
            env = {k: v for k, v in os.environ.items() if k != "KBENCH_IMPORT_CPP_EXTENSION"}
            if told:
                env["KBENCH_IMPORT_CPP_EXTENSION"] = "1"
            seen += self._first_outputs_in_own_worker(path, env=env)
        self.assertEqual(seen, [1.0, 0.0])

    def test_candidate_cannot_make_cases(self):
        self.load_candidate(as_candidate(LINEAR_PROBLEM))
        reply, _ = self.cand.call({"cmd": "make_case", "seed": 1, "forward_seed": 1})
        self.assert_error(reply, "protocol")


EXTENSION_CANDIDATE = """
import torch
from torch.utils.cpp_extension import load_inline

cpp = "torch::Tensor relu2(torch::Tensor x) { BODY }"
ext = load_inline(name="kbench_test_relu_NAME", cpp_sources=cpp, functions=["relu2"], verbose=True)

class ModelNew(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)

    def forward(self, x):
        return ext.relu2(self.linear(x))
"""


@unittest.skipUnless(os.environ.get("KBENCH_TEST_EXTENSIONS") == "1", "set KBENCH_TEST_EXTENSIONS=1 (slow: builds C++)")
class ExtensionBuildTests(WorkerTestCase):
    """Real torch.utils.cpp_extension builds (about a minute); off by default."""

    def test_built_extension_runs_and_its_log_goes_to_stderr(self):
        self.load_reference(self.linear)
        source = EXTENSION_CANDIDATE.replace("BODY", "return torch::relu(x);").replace("NAME", "ok")
        reply, _ = self.load_candidate(source)
        self.assertEqual(reply["type"], "loaded", reply)
        self.assertTrue(os.path.isdir(os.path.join(self.files.dir.name, "build", "kbench_test_relu_ok")))
        case, t = self.make_case()
        reply, out = self.run_case(case, t)
        self.assert_bit_identical(out["out:0"], t["out:0"])

    def test_a_load_that_compiles_again_says_why(self):
        self.load_reference(self.linear)
        for body in ("return torch::relu(x);", "return torch::relu(x) * 1;"):
            source = EXTENSION_CANDIDATE.replace("BODY", body).replace("NAME", "again")
            reply, _ = self.load_candidate(source)
            self.assertEqual(reply["type"], "loaded", reply)
        log = self.cand.stderr_text()
        self.assertEqual(log.count("ninja compiles again in"), 1, log[-3000:])
        self.assertIn("kbench_test_relu_again", log)
        self.assertRegex(log, r"\n  (command line changed for|output )\S*main\.o")

    def test_failed_build_is_compile_error(self):
        source = EXTENSION_CANDIDATE.replace("BODY", "return not_a_function(x);").replace("NAME", "bad")
        reply, path = self.load_candidate(source)
        self.assert_error(reply, "compile_error", "load")
        self.assertIn("extension build failed", reply["message"])
        self.assertIn(path, reply["message"])
        self.assertIn("not_a_function", reply["message"])  # what the compiler said
        self.assertIn("not_a_function", self.cand.stderr_text())  # the compiler's own log
