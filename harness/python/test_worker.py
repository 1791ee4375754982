"""End-to-end tests of worker.py on CPU: start it as a subprocess in both roles and speak
the framed protocol of PROTOCOL.md to it.

    /root/.cache/kbench/venv/bin/python -m unittest harness/python/test_worker.py -v

Workers are shared within a test class (a worker may be sent `load` again) because each
start imports torch, which takes seconds.
"""

import ctypes
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
PYTHON = os.environ.get("KBENCH_TEST_PYTHON", sys.executable)
# A worker that does not answer within this many seconds is killed and the test fails.
WATCHDOG_S = 60

WIRE = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "bool": torch.bool,
}  # fmt: skip
WIRE_OF = {v: k for k, v in WIRE.items()}


def tensor_bytes(t):
    t = t.detach().contiguous().cpu().reshape(-1)
    if t.dtype != torch.uint8:
        t = t.view(torch.uint8)
    return t.numpy().tobytes()


def tensor_from_bytes(data, dtype, shape):
    if not data:
        return torch.empty(shape, dtype=WIRE[dtype])
    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    return raw.view(WIRE[dtype]).reshape(shape).clone()


def encode_frame(header, tensors=(), pad=0):
    """A frame; `pad` junk bytes at the start of the payload make every offset unaligned."""
    payload = bytearray(b"\xab" * pad)
    specs = []
    for name, t in tensors:
        data = tensor_bytes(t)
        specs.append({"name": name, "dtype": WIRE_OF[t.dtype], "shape": list(t.shape),
                      "offset": len(payload), "nbytes": len(data)})  # fmt: skip
        payload += data
    if specs:
        header = dict(header, tensors=specs)
    raw = json.dumps(header).encode()
    return b"KBF1" + struct.pack("<IQ", len(raw), len(payload)) + raw + bytes(payload)


class Worker:
    """A worker subprocess and a tiny frame client."""

    def __init__(self, role, env=None, args=None):
        self.stderr = tempfile.TemporaryFile()
        argv = [PYTHON, "-u", WORKER] + ([role] if args is None else args)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env
        )
        self.watchdog = threading.Timer(WATCHDOG_S, self.proc.kill)
        self.watchdog.start()

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, header, tensors=(), pad=0):
        self.send_raw(encode_frame(header, tensors, pad))

    def _read(self, n):
        data = self.proc.stdout.read(n)
        if len(data) != n:
            raise EOFError(f"worker closed its stdout; stderr:\n{self.stderr_text()}")
        return data

    def recv(self):
        """(header, {name: tensor}) of the next frame, checking its layout strictly."""
        prefix = self._read(16)
        assert prefix[:4] == b"KBF1", prefix
        header_len, payload_len = struct.unpack("<IQ", prefix[4:])
        header = json.loads(self._read(header_len))
        payload = self._read(payload_len) if payload_len else b""
        tensors = {}
        end = 0
        for s in header.get("tensors", []):
            assert s["offset"] == end, "tensors are packed back to back"
            end = s["offset"] + s["nbytes"]
            tensors[s["name"]] = tensor_from_bytes(payload[s["offset"]:end], s["dtype"], s["shape"])
        assert end == len(payload), "no trailing payload"
        return header, tensors

    def call(self, header, tensors=(), pad=0):
        self.send(header, tensors, pad)
        return self.recv()

    def stderr_text(self):
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def close(self):
        try:
            if self.proc.poll() is None:
                reply, _ = self.call({"cmd": "exit"})
                assert reply["type"] == "bye", reply
            return self.wait()
        finally:
            self.proc.stdin.close()
            self.proc.stdout.close()
            self.stderr.close()

    def wait(self):
        code = self.proc.wait(timeout=WATCHDOG_S)
        self.watchdog.cancel()
        return code


LINEAR_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))

batch_size = 4
in_features = 16
out_features = 8

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features]
"""

# Integer and scalar inputs, and a tuple output (a float and an integer tensor).
MIXED_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.emb = nn.Embedding(10, n)

    def forward(self, idx, x, scale):
        return (self.emb(idx) * scale + x, idx * 2)

def get_inputs():
    return [torch.randint(0, 10, (3,)), torch.rand(3, 4), 0.5]

def get_init_inputs():
    return [4]
"""


def as_candidate(problem_source):
    """The reference renamed: the honest candidate."""
    return problem_source.replace("class Model(", "class ModelNew(")


class TempFiles:
    def __init__(self):
        self.dir = tempfile.TemporaryDirectory(prefix="kbench-worker-test-")

    def write(self, name, source):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        return path


class WorkerTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.files = TempFiles()
        cls.linear = cls.files.write("1_Linear.py", LINEAR_PROBLEM)
        cls.mixed = cls.files.write("2_Mixed.py", MIXED_PROBLEM)
        cls.ref = Worker("reference")
        cls.cand = Worker("candidate")
        hello, _ = cls.ref.recv()
        cls.ref_hello = hello
        hello, _ = cls.cand.recv()
        cls.cand_hello = hello
        cls.n_candidates = 0

    @classmethod
    def tearDownClass(cls):
        codes = (cls.ref.close(), cls.cand.close())
        cls.files.dir.cleanup()
        assert codes == (0, 0), codes

    # -- helpers -----------------------------------------------------------------------

    def load_reference(self, problem, precision="fp32", want_f64=True, device="cpu"):
        reply, _ = self.ref.call({"cmd": "load", "problem_path": problem, "device": device,
                                  "precision": precision, "weight_seed": 42,
                                  "want_f64": want_f64, "num_threads": 1})  # fmt: skip
        self.assertEqual(reply["type"], "loaded", reply)
        return reply

    def load_candidate(self, source, problem=None, precision="fp32", device="cpu", **extra):
        type(self).n_candidates += 1
        path = self.files.write(f"cand_{self.n_candidates}.py", source)
        build = os.path.join(self.files.dir.name, "build")
        reply, _ = self.cand.call({"cmd": "load", "problem_path": problem or self.linear,
                                   "candidate_path": path, "device": device,
                                   "precision": precision, "weight_seed": 42,
                                   "num_threads": 1, "build_dir": build, **extra})  # fmt: skip
        return reply, path

    def make_case(self, seed=7, forward_seed=11, **extra):
        reply, tensors = self.ref.call({"cmd": "make_case", "seed": seed, "forward_seed": forward_seed, **extra})
        self.assertEqual(reply["type"], "case", reply)
        return reply, tensors

    def run_case(self, case_reply, tensors, forward_seed=11, pad=0, **extra):
        inputs = [(a["tensor"], tensors[a["tensor"]]) for a in case_reply["inputs"] if "tensor" in a]
        cmd = {"cmd": "run_case", "forward_seed": forward_seed, "inputs": case_reply["inputs"], **extra}
        return self.cand.call(cmd, inputs, pad=pad)

    def assert_error(self, reply, kind, phase=None):
        self.assertEqual(reply["type"], "error", reply)
        self.assertEqual(reply["kind"], kind, reply)
        if phase is not None:
            self.assertEqual(reply["phase"], phase, reply)
        self.assertIsInstance(reply["message"], str)
        self.assertIsInstance(reply["traceback"], str)

    def assert_bit_identical(self, a, b):
        self.assertEqual(a.dtype, b.dtype)
        self.assertEqual(a.shape, b.shape)
        self.assertEqual(tensor_bytes(a), tensor_bytes(b))


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


class HelloAndReferenceTests(WorkerTestCase):
    def test_hello(self):
        for hello, role in ((self.ref_hello, "reference"), (self.cand_hello, "candidate")):
            self.assertEqual(hello["type"], "hello")
            self.assertEqual(hello["magic"], "kbench-worker")
            self.assertEqual(hello["protocol"], 1)
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

    def test_reference_time(self):
        self.load_reference(self.linear)
        self.make_case()
        reply, _ = self.ref.call({"cmd": "time", "warmup": 2, "trials": 7, "l2_flush": True, "forward_seed": 1})
        self.assertEqual(reply["type"], "timing", reply)
        self.assertEqual(reply["clock"], "perf_counter")
        self.assertEqual(len(reply["samples_ms"]), 7)
        self.assertTrue(all(isinstance(s, float) and s > 0 for s in reply["samples_ms"]))

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

    def test_problem_printing_does_not_corrupt_the_channel(self):
        path = self.files.write("5_Chatty.py", LINEAR_PROBLEM + "\nprint('KBF1 hello from the problem')\n")
        self.load_reference(path)
        self.make_case()
        self.assertIn("KBF1 hello from the problem", self.ref.stderr_text())


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
                self.assertNotIn("worker.py", reply["traceback"])

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
        # the time command reports the same failure in its own phase
        reply, _ = self.cand.call({"cmd": "time", "warmup": 0, "trials": 2, "l2_flush": True, "forward_seed": 0})
        self.assert_error(reply, "runtime_error", "time")

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

    def test_candidate_time(self):
        self.load_reference(self.linear)
        self.load_candidate(as_candidate(LINEAR_PROBLEM))
        reply, _ = self.cand.call({"cmd": "time", "warmup": 1, "trials": 5, "l2_flush": True, "forward_seed": 0})
        self.assert_error(reply, "protocol", "time")  # no current case yet
        case, t = self.make_case()
        self.run_case(case, t)
        reply, _ = self.cand.call({"cmd": "time", "warmup": 3, "trials": 5, "l2_flush": True, "forward_seed": 0})
        self.assertEqual(reply["type"], "timing", reply)
        self.assertEqual(reply["clock"], "perf_counter")
        self.assertEqual(len(reply["samples_ms"]), 5)
        self.assertTrue(all(s > 0 for s in reply["samples_ms"]))

    def test_candidate_cannot_make_cases(self):
        self.load_candidate(as_candidate(LINEAR_PROBLEM))
        reply, _ = self.cand.call({"cmd": "make_case", "seed": 1, "forward_seed": 1})
        self.assert_error(reply, "protocol")


# Floating, integer, bool, scalar and a second floating input; two outputs. Output 0 depends
# on x, idx and scale; output 1 on mask and y. x's last dimension is odd (cancellation).
FAMILY_PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, idx, mask, scale, y):
        return (x * scale + idx.sum(), torch.where(mask, y, -y))

def get_inputs():
    return [torch.rand(16, 65), torch.randint(0, 10, (5,)), torch.rand(16) > 0.5, 0.5, torch.rand(16)]

def get_init_inputs():
    return []
"""

FAMILIES = ["signed", "nan-inf", "denormal", "fp16-saturation", "large", "small", "cancellation"]


def simple_problem(forward, inputs="[torch.rand(4, 32)]", init="[]", params=""):
    """A problem whose Model.forward(self, x, *rest) returns `forward`."""
    return f"""
import time
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, *args):
        super().__init__()
{textwrap.indent(textwrap.dedent(params), " " * 8) if params else ""}
    def forward(self, x, *rest):
        return {forward}

def get_inputs():
    return {inputs}

def get_init_inputs():
    return {init}
"""


class CaseFamilyTests(WorkerTestCase):
    """make_case with `family` (PROTOCOL.md, "Case families")."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.family = cls.files.write("10_Family.py", FAMILY_PROBLEM)

    def case(self, family=None, seed=5, **extra):
        if family is not None:
            extra["family"] = family
        return self.make_case(seed=seed, **extra)

    def test_random_is_unchanged(self):
        for problem in (self.family, self.linear):
            with self.subTest(problem=problem):
                self.load_reference(problem)
                plain, tp = self.case()
                rand, tr = self.case("random")
                self.assertEqual((plain["family"], plain["transformed"]), ("random", 0))
                self.assertEqual((rand["family"], rand["transformed"]), ("random", 0))
                self.assertEqual(plain["inputs"], rand["inputs"])
                self.assertEqual(set(tp), set(tr))
                for name in tp:
                    self.assert_bit_identical(tp[name], tr[name])
                self.assertNotIn("stability", plain)
        # the problem's own values: what get_inputs makes under the seed
        self.load_reference(self.family)
        _, t = self.case(seed=9)
        torch.manual_seed(9)
        x = torch.rand(16, 65)
        self.assert_bit_identical(t["in:0"], x)

    def test_families_are_deterministic_and_keep_shapes_dtypes_and_non_floats(self):
        for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            self.load_reference(self.family, precision=precision)
            base, tb = self.case()
            for family in FAMILIES:
                with self.subTest(precision=precision, family=family):
                    a, ta = self.case(family)
                    b, tb2 = self.case(family)
                    _, tc = self.case(family, seed=6)
                    self.assertEqual((a["family"], a["transformed"]), (family, 2))
                    self.assertEqual(a["inputs"], base["inputs"])  # the scalar 0.5 stays
                    self.assertEqual(set(ta), set(tb))
                    for name in ta:
                        self.assert_bit_identical(ta[name], tb2[name])  # same seed, same case
                        self.assertEqual((ta[name].dtype, ta[name].shape), (tb[name].dtype, tb[name].shape))
                    self.assertEqual(ta["in:0"].dtype, dtype)
                    # integer and bool inputs exactly as the problem makes them
                    self.assert_bit_identical(ta["in:1"], tb["in:1"])
                    self.assert_bit_identical(ta["in:2"], tb["in:2"])
                    # the floating ones replaced, and by the seed
                    self.assertFalse(torch.equal(ta["in:0"], tb["in:0"]))
                    self.assertFalse(torch.equal(ta["in:0"].nan_to_num(), tc["in:0"].nan_to_num()))

    def test_family_values(self):
        self.load_reference(self.family)
        _, t = self.case("signed")
        x = t["in:0"]
        self.assertTrue((x < 0).any() and (x > 0).any())
        self.assertTrue(torch.isfinite(x).all())
        self.assertGreater(x.abs().max(), 2.0)  # mixed scales, not [0, 1)

        _, t = self.case("nan-inf")
        for x in (t["in:0"], t["in:4"]):
            self.assertEqual(int(torch.isnan(x).sum()), 1)
            self.assertEqual(int((x == math.inf).sum()), 1)
            self.assertEqual(int((x == -math.inf).sum()), 1)
            self.assertEqual(int(torch.isfinite(x).sum()), x.numel() - 3)

        _, t = self.case("fp16-saturation")
        a = t["in:0"].abs()
        self.assertTrue(((a >= 32752) & (a <= 65504)).all())
        self.assertTrue((t["in:0"] < 0).any() and (t["in:0"] > 0).any())

        _, t = self.case("large")
        a = t["in:0"].abs()
        self.assertTrue(((a >= 1e2) & (a <= 1e5)).all(), (a.min(), a.max()))
        self.assertGreater(a.max(), 1e4)
        self.assertLess(a.min(), 1e3)
        self.assertTrue((t["in:0"] < 0).any() and (t["in:0"] > 0).any())

        _, t = self.case("small")
        a = t["in:0"].abs()
        self.assertTrue(((a >= 1e-8) & (a <= 1e-5)).all(), (a.min(), a.max()))
        self.assertTrue((t["in:0"] < 0).any() and (t["in:0"] > 0).any())

        _, t = self.case("cancellation")
        x = t["in:0"].double()
        self.assertTrue((x[:, -1] == 0).all())  # 65 columns: the odd one out is 0
        rel = x.sum(-1).abs() / x.abs().sum(-1)
        self.assertLess(float(rel.max()), 1e-5)
        self.assertGreater(float(x.abs().max()), 100)  # large terms
        # each row: 32 values and their negatives (up to 1e-6 noise), in another order
        first, second = x[:, :32].sort(-1).values, (-x[:, 32:64]).sort(-1).values
        torch.testing.assert_close(first, second, rtol=1e-5, atol=0)
        self.assertFalse(torch.equal(x[:, :32], -x[:, 32:64]))

    def test_denormal_for_the_working_dtype(self):
        for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16), ("bf16", torch.bfloat16)):
            with self.subTest(precision=precision):
                self.load_reference(self.family, precision=precision)
                _, t = self.case("denormal")
                x = t["in:0"]
                self.assertEqual(x.dtype, dtype)
                tiny = torch.finfo(dtype).smallest_normal
                sub = (x != 0) & (x.abs() < tiny)
                self.assertTrue(torch.isfinite(x).all())
                self.assertEqual(int((x == 0).sum()), 0)
                frac = float(sub.float().mean())
                self.assertGreater(frac, 0.4)
                self.assertLess(frac, 0.6)
                # the others are normal numbers in [tiny, 1]
                a = x[~sub].abs().float()
                self.assertTrue(((a >= tiny) & (a <= 1)).all())
                self.assertTrue((x < 0).any() and (x > 0).any())

    def test_unknown_family_is_a_protocol_error(self):
        self.load_reference(self.family)
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 1, "family": "gaussian"})
        self.assert_error(reply, "protocol", "run")
        self.assertIn("gaussian", reply["message"])
        for name in ["random"] + FAMILIES:
            self.assertIn(name, reply["message"])
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 1, "family": "signed",
                                  "stability_rtol": "tight"})  # fmt: skip
        self.assert_error(reply, "protocol", "run")
        self.case("signed")  # the loop goes on

    def test_reference_runs_on_the_family_inputs(self):
        self.load_reference(self.family)
        reply, t = self.case("signed")
        self.assertEqual((reply["outputs"], reply["outputs_f64"]), (2, 2))
        x, idx, mask, y = t["in:0"], t["in:1"], t["in:2"], t["in:4"]
        self.assert_bit_identical(t["out:0"], x * 0.5 + idx.sum())
        self.assert_bit_identical(t["out:1"], torch.where(mask, y, -y))
        self.assert_bit_identical(t["out64:0"], x.double() * 0.5 + idx.sum())

    def test_candidate_gets_the_family_inputs(self):
        self.load_reference(self.family)
        loaded, _ = self.load_candidate(as_candidate(FAMILY_PROBLEM), self.family)
        self.assertEqual(loaded["type"], "loaded", loaded)
        case, t = self.case("nan-inf")
        reply, out = self.run_case(case, t)
        self.assertEqual(reply["type"], "outputs", reply)
        self.assert_bit_identical(out["out:0"], t["out:0"])
        self.assert_bit_identical(out["out:1"], t["out:1"])


class StabilityTests(WorkerTestCase):
    """make_case with `stability_rtol` (PROTOCOL.md, "Reference stability")."""

    def load(self, source, name, **kw):
        path = self.files.write(name, source)
        self.load_reference(path, **kw)
        return path

    def test_deterministic_model_repeats_exactly(self):
        self.load_reference(self.linear)
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        st = reply["stability"]
        self.assertEqual(set(st), {"repeat", "f64"})
        self.assertLessEqual(st["repeat"]["max_excess"], 0)
        self.assertEqual(st["repeat"]["nan_mismatch"], 0)
        self.assertEqual(st["repeat"]["elements"], 32)
        self.assertLess(st["f64"]["max_excess"], 1e-4)
        self.assertEqual(st["f64"]["nan_mismatch"], 0)
        self.assertEqual(st["f64"]["elements"], 32)
        self.assertIsInstance(reply["stability_s"], float)
        # not for random, and not without stability_rtol
        reply, _ = self.make_case(family="random", stability_rtol=1e-4)
        self.assertNotIn("stability", reply)
        reply, _ = self.make_case(family="signed")
        self.assertNotIn("stability", reply)

    def test_unseeded_noise_shows_in_repeat(self):
        self.load(simple_problem(
            "x + torch.randn(x.shape, generator=torch.Generator().manual_seed(time.perf_counter_ns())) * 1e-2"
        ), "11_Noise.py")  # fmt: skip
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertGreater(reply["stability"]["repeat"]["max_excess"], 0)
        self.assertEqual(reply["stability"]["repeat"]["nan_mismatch"], 0)

    def test_fp32_overflow_against_float64(self):
        self.load(simple_problem("torch.exp(x)", "[torch.rand(256)]"), "12_Exp.py")
        reply, t = self.make_case(family="large", stability_rtol=1e-4)
        st = reply["stability"]
        self.assertTrue(torch.isinf(t["out:0"]).any())
        self.assertGreater(st["f64"]["nan_mismatch"], 0)
        self.assertEqual(st["f64"]["elements"], 256)
        # the working precision agrees with itself
        self.assertEqual(st["repeat"]["nan_mismatch"], 0)
        self.assertLessEqual(st["repeat"]["max_excess"], 0)

    def test_without_float64_model_f64_is_null(self):
        self.load_reference(self.linear, want_f64=False)
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertIsNone(reply["stability"]["f64"])
        self.assertLessEqual(reply["stability"]["repeat"]["max_excess"], 0)
        path = self.files.write("13_NoF64.py", simple_problem(
            "x * 2 if x.dtype != torch.float64 else torch.zeros(1).bad_call()"))  # fmt: skip
        self.load_reference(path)
        reply, _ = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertIn("f64_error", reply)
        self.assertIsNone(reply["stability"]["f64"])

    def test_repeat_runs_on_pristine_inputs(self):
        # A reference that writes to its input: the second run must see the case's inputs,
        # not the first run's leftovers.
        self.load(simple_problem("x.mul_(2)"), "14_InPlace.py")
        reply, t = self.make_case(family="signed", stability_rtol=0.0)
        self.assert_bit_identical(t["out:0"], t["in:0"] * 2)
        self.assertLessEqual(reply["stability"]["repeat"]["max_excess"], 0)
        self.assertLessEqual(reply["stability"]["f64"]["max_excess"], 0)

    def test_repeat_is_not_fooled_by_an_output_that_aliases_its_input(self):
        # The first run's output is the input tensor itself; restoring the inputs for the
        # second run must not overwrite it (or the repeat would compare a run with itself).
        self.load(simple_problem(
            "x.add_(torch.randn(x.shape, generator=torch.Generator().manual_seed(time.perf_counter_ns())) * 1e-2)"
        ), "15_InPlaceNoise.py")  # fmt: skip
        reply, t = self.make_case(family="signed", stability_rtol=1e-4)
        self.assertGreater(reply["stability"]["repeat"]["max_excess"], 0)
        self.assertLess(float((t["out:0"] - t["in:0"]).abs().max()), 0.1)

    def test_nan_inf_outputs_agree_with_themselves(self):
        self.load_reference(self.linear)
        reply, t = self.make_case(family="nan-inf", stability_rtol=1e-4)
        self.assertFalse(torch.isfinite(t["out:0"]).all())
        self.assertEqual(reply["stability"]["repeat"]["nan_mismatch"], 0)
        self.assertEqual(reply["stability"]["f64"]["nan_mismatch"], 0)


class AuditTests(WorkerTestCase):
    """The `audit` command (PROTOCOL.md, "audit")."""

    def audit(self, source, name, families=("random", "signed"), rtol=1e-4, **extra):
        path = self.files.write(name, source)
        self.load_reference(path, want_f64=False)
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4,
                                  "families": list(families), "rtol": rtol, **extra})  # fmt: skip
        self.assertEqual(reply["type"], "audit", reply)
        self.assertEqual(list(reply["families"]), list(families))
        return reply["families"]

    def test_identity(self):
        fams = self.audit(simple_problem("x"), "20_Identity.py")
        for fam in ("random", "signed"):
            (out,) = fams[fam]["outputs"]
            self.assertEqual((out["shape"], out["dtype"], out["elements"]), ([4, 32], "f32", 128))
            self.assertLessEqual(out["input_excess"][0], 0)
            self.assertEqual(out["nonfinite"], 0)
            self.assertGreater(out["input_sensitivity"][0]["max_excess"], 1e-4)
            self.assertEqual(out["weight_sensitivity"], {})
        self.assertEqual((fams["random"]["transformed"], fams["signed"]["transformed"]), (0, 1))
        self.assertIsInstance(fams["signed"]["seconds"], float)

    def test_relu_is_the_identity_on_random_only(self):
        fams = self.audit(simple_problem("torch.relu(x)"), "21_ReLU.py")
        self.assertLessEqual(fams["random"]["outputs"][0]["input_excess"][0], 0)
        self.assertGreater(fams["signed"]["outputs"][0]["input_excess"][0], 1e-4)

    def test_constant_output(self):
        fams = self.audit(simple_problem("x * 0 + 1"), "22_Const.py")
        for fam in ("random", "signed"):
            out = fams[fam]["outputs"][0]
            self.assertLessEqual(out["constant_excess"], 0)
            self.assertEqual(out["max_abs"], 1.0)
            self.assertLessEqual(out["input_sensitivity"][0]["max_excess"], 0)
        # not constant: x itself
        fams = self.audit(simple_problem("x"), "20_Identity.py", families=["random"])
        self.assertGreater(fams["random"]["outputs"][0]["constant_excess"], 1e-4)

    def test_softmax_over_a_long_row_is_below_tolerance(self):
        fams = self.audit(simple_problem("torch.softmax(x, dim=-1)", "[torch.rand(2, 100000)]"), "23_Softmax.py")
        out = fams["random"]["outputs"][0]
        self.assertLess(out["zeros_excess"], 1e-4)
        self.assertLess(out["max_abs"], 1e-4)
        self.assertGreater(out["input_excess"][0], 1e-4)  # not the input either
        # the float64 definitions: zeros_excess = max (1 - rtol) |o|
        self.assertAlmostEqual(out["zeros_excess"], out["max_abs"] * (1 - 1e-4), delta=1e-12)

    def test_weight_sensitivity(self):
        params = "self.w = nn.Parameter(torch.ones(32))"
        fams = self.audit(simple_problem("x + 0 * self.w", params=params), "24_AddW.py")
        for fam in ("random", "signed"):
            ws = fams[fam]["outputs"][0]["weight_sensitivity"]
            self.assertEqual(set(ws), {"w"})
            self.assertLessEqual(ws["w"]["max_excess"], 0)
            self.assertEqual(ws["w"]["nan_mismatch"], 0)
            self.assertEqual(fams[fam]["weights_total"], 1)
        path = self.files.write("25_MulW.py", simple_problem("x * self.w", params=params))
        self.load_reference(path, want_f64=False)
        _, before = self.make_case()
        fams = self.audit(simple_problem("x * self.w", params=params), "25_MulW.py")
        for fam in ("random", "signed"):
            self.assertGreater(fams[fam]["outputs"][0]["weight_sensitivity"]["w"]["max_excess"], 1e-4)
        # the weights are restored exactly
        _, after = self.make_case()
        self.assert_bit_identical(before["out:0"], after["out:0"])
        self.assert_bit_identical(after["out:0"], after["in:0"])  # w is still all ones

    def test_max_weights_spreads_over_the_parameters(self):
        params = "\n".join(f"self.w{j} = nn.Parameter(torch.full((32,), {j + 1.0}))" for j in range(5))
        forward = "x * self.w0 * self.w1 * self.w2 * self.w3 * self.w4"
        fams = self.audit(simple_problem(forward, params=params), "26_FiveW.py", families=["random"], max_weights=2)
        fam = fams["random"]
        self.assertEqual(fam["weights_total"], 5)
        ws = fam["outputs"][0]["weight_sensitivity"]
        self.assertEqual(set(ws), {"w0", "w2"})
        self.assertTrue(all(m["max_excess"] > 0 for m in ws.values()))
        fams = self.audit(simple_problem(forward, params=params), "26_FiveW.py", families=["random"], max_weights=0)
        self.assertEqual(fams["random"]["outputs"][0]["weight_sensitivity"], {})

    def test_ignored_input(self):
        fams = self.audit(simple_problem("x * 2", "[torch.rand(4, 32), torch.rand(4, 32)]"), "27_Ignores.py")
        for fam in ("random", "signed"):
            sens = fams[fam]["outputs"][0]["input_sensitivity"]
            self.assertEqual(len(sens), 2)
            self.assertGreater(sens[0]["max_excess"], 1e-4)
            self.assertLessEqual(sens[1]["max_excess"], 0)
            self.assertEqual(sens[1]["nan_mismatch"], 0)
            # input_excess: x * 2 is neither input
            self.assertGreater(min(fams[fam]["outputs"][0]["input_excess"]), 1e-4)

    def test_mixed_inputs_and_outputs(self):
        path = self.files.write("10_Family.py", FAMILY_PROBLEM)
        self.load_reference(path, want_f64=False)
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4,
                                  "families": ["signed", "nan-inf"], "rtol": 1e-4})  # fmt: skip
        self.assertEqual(reply["type"], "audit", reply)
        signed = reply["families"]["signed"]
        self.assertEqual(signed["transformed"], 2)
        o0, o1 = signed["outputs"]
        self.assertEqual((o0["shape"], o1["shape"]), ([16, 65], [16]))
        # inputs: x, idx, mask, scale (not a tensor), y
        self.assertEqual(len(o0["input_sensitivity"]), 5)
        self.assertIsNone(o0["input_sensitivity"][3])
        self.assertIsNone(o0["input_excess"][3])
        self.assertIsNone(o0["input_excess"][1])  # integer input
        self.assertIsNone(o0["input_excess"][4])  # other element count
        self.assertIsNotNone(o1["input_excess"][4])  # y has o1's 16 elements
        dep0 = [m is not None and m["max_excess"] > 1e-4 for m in o0["input_sensitivity"]]
        dep1 = [m is not None and m["max_excess"] > 1e-4 for m in o1["input_sensitivity"]]
        self.assertEqual(dep0, [True, True, False, False, False])
        self.assertEqual(dep1, [False, False, True, False, True])
        nan_inf = reply["families"]["nan-inf"]["outputs"]
        self.assertEqual(nan_inf[0]["nonfinite"], 3)
        self.assertEqual(nan_inf[1]["nonfinite"], 3)
        self.assertIsNotNone(nan_inf[0]["max_abs"])

    def test_same_inputs_as_make_case(self):
        # The audit's unperturbed run uses make_case's inputs: an identity's input_excess
        # against the make_case input is exactly what make_case's output shows.
        path = self.files.write("20_Identity.py", simple_problem("x"))
        self.load_reference(path, want_f64=False)
        _, t = self.make_case(seed=3, forward_seed=4, family="large")
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4, "families": ["large"], "rtol": 0})
        out = reply["families"]["large"]["outputs"][0]
        self.assertEqual(out["max_abs"], float(t["out:0"].abs().max()))
        self.assertEqual(out["constant_excess"],
                         float(((t["out:0"].max() + t["out:0"].min()).double() / 2 - t["out:0"].double()).abs().max()))  # fmt: skip

    def test_weights_total_on_each_output(self):
        params = "self.w = nn.Parameter(torch.ones(32))\nself.b = nn.Parameter(torch.zeros(32))"
        fams = self.audit(simple_problem("(x * self.w, x + self.b)", params=params), "28_TwoW.py", families=["signed"])
        fam = fams["signed"]
        self.assertEqual(fam["weights_total"], 2)
        self.assertEqual([o["weights_total"] for o in fam["outputs"]], [2, 2])
        o0, o1 = fam["outputs"]
        self.assertGreater(o0["weight_sensitivity"]["w"]["max_excess"], 1e-4)
        self.assertLessEqual(o0["weight_sensitivity"]["b"]["max_excess"], 0)
        self.assertLessEqual(o1["weight_sensitivity"]["w"]["max_excess"], 0)
        self.assertGreater(o1["weight_sensitivity"]["b"]["max_excess"], 1e-4)
        self.assertFalse(fam["rows_cut"])
        self.assertNotIn("error", fam)

    def test_max_rows_cuts_the_batch_where_the_model_allows_it(self):
        inputs = "[torch.rand(8, 32), torch.rand(8, 32), torch.rand(32)]"
        fams = self.audit(simple_problem("x + rest[0] + rest[1]", inputs), "29_Rows.py", max_rows=3)
        for fam in ("random", "signed"):
            f = fams[fam]
            self.assertTrue(f["rows_cut"])
            (o,) = f["outputs"]
            self.assertEqual(o["shape"], [3, 32])
            self.assertTrue(all(m["max_excess"] > 1e-4 for m in o["input_sensitivity"]))
        # a model fixed to its batch: the full inputs
        fams = self.audit(simple_problem("x.reshape(8, 32) * 2", "[torch.rand(8, 32)]"), "30_Fixed.py", max_rows=3)
        self.assertFalse(fams["random"]["rows_cut"])
        self.assertEqual(fams["random"]["outputs"][0]["shape"], [8, 32])
        # no more rows than asked for: nothing to cut
        fams = self.audit(simple_problem("x"), "20_Identity.py", max_rows=100)
        self.assertFalse(fams["random"]["rows_cut"])
        self.assertEqual(fams["random"]["outputs"][0]["shape"], [4, 32])

    def test_a_family_that_fails_is_reported_and_the_others_measured(self):
        forward = "x if bool((x >= 0).all()) else torch.zeros(1).no_such_method()"
        fams = self.audit(simple_problem(forward), "31_PositiveOnly.py")
        self.assertNotIn("error", fams["random"])
        self.assertEqual(len(fams["random"]["outputs"]), 1)
        self.assertEqual(fams["signed"]["outputs"], [])
        self.assertIn("no_such_method", fams["signed"]["error"])
        self.assertEqual(fams["signed"]["transformed"], 1)
        self.assertIsInstance(fams["signed"]["seconds"], float)

    def test_bad_requests(self):
        self.load_reference(self.linear)
        base = {"cmd": "audit", "seed": 1, "forward_seed": 1, "families": ["random"], "rtol": 1e-4}
        for bad in ({"families": ["gaussian"]}, {"families": "random"}, {"rtol": "x"}, {"rtol": -1},
                    {"max_weights": -1}, {"seed": None}, {"max_rows": 0}):  # fmt: skip
            with self.subTest(bad=bad):
                reply, _ = self.ref.call(dict(base, **bad))
                self.assert_error(reply, "protocol", "run")
        reply, _ = self.cand.call(base)
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

    def test_failed_build_is_compile_error(self):
        source = EXTENSION_CANDIDATE.replace("BODY", "return not_a_function(x);").replace("NAME", "bad")
        reply, path = self.load_candidate(source)
        self.assert_error(reply, "compile_error", "load")
        self.assertIn("extension build failed", reply["message"])
        self.assertIn(path, reply["message"])
        self.assertIn("not_a_function", self.cand.stderr_text())  # the compiler's own log


CUDA_PROBLEM = LINEAR_PROBLEM.replace("batch_size = 4", "batch_size = 4096").replace(
    "in_features = 16", "in_features = 1024").replace("out_features = 8", "out_features = 1024")


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class CudaTests(WorkerTestCase):
    def test_cuda_case_run_and_time(self):
        problem = self.files.write("9_CudaLinear.py", CUDA_PROBLEM)
        for precision in ("fp32", "bf16"):
            with self.subTest(precision=precision):
                reply = self.load_reference(problem, precision, device="cuda:0")
                self.assertTrue(reply["f64_available"])
                self.assertGreater(reply["l2_bytes"], 1 << 20)
                loaded, _ = self.load_candidate(as_candidate(CUDA_PROBLEM), problem, precision, "cuda:0")
                self.assertEqual(loaded["type"], "loaded", loaded)
                case, t = self.make_case()
                self.assertEqual(list(t["out64:0"].shape), [4096, 1024])
                reply, out = self.run_case(case, t, pad=1)
                self.assert_bit_identical(out["out:0"], t["out:0"])
                for w in (self.ref, self.cand):
                    reply, _ = w.call({"cmd": "time", "warmup": 3, "trials": 20, "l2_flush": True, "forward_seed": 0})
                    self.assertEqual(reply["type"], "timing", reply)
                    self.assertEqual(reply["clock"], "cuda_event")
                    self.assertEqual(len(reply["samples_ms"]), 20)
                    self.assertTrue(all(s > 0 for s in reply["samples_ms"]))
                    print(f"\n{precision} {w is self.ref and 'reference' or 'candidate'} "
                          f"median {sorted(reply['samples_ms'])[10]:.4f} ms", file=sys.stderr)

    def test_side_stream_work_is_timed(self):
        # The candidate leaves its work on a side stream; the device-wide synchronize
        # before the end event must still count it.
        self.load_reference(self.linear, device="cuda:0")
        reply, _ = self.load_candidate("""
            import torch
            class ModelNew(torch.nn.Module):
                def __init__(self, *args):
                    super().__init__()
                    self.side = torch.cuda.Stream()
                def forward(self, x):
                    with torch.cuda.stream(self.side):
                        a = torch.randn(4096, 4096, device=x.device)
                        for _ in range(20):
                            a = a @ a
                            a = a / a.abs().max()
                    return x.clone()
        """, device="cuda:0")
        self.assertEqual(reply["type"], "loaded", reply)
        case, t = self.make_case()
        self.run_case(case, t)
        reply, _ = self.cand.call({"cmd": "time", "warmup": 1, "trials": 5, "l2_flush": False, "forward_seed": 0})
        # 20 fp32 4096^3 matmuls: well over a millisecond on any GPU
        self.assertGreater(min(reply["samples_ms"]), 1.0, reply)


class _DeviceBytes:
    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None,
        }  # fmt: skip


class _HarnessBuffers:
    """What the Rust harness does for device I/O, from this test process: cuMemAlloc'd
    buffers with IPC handles, read back through __cuda_array_interface__."""

    def __init__(self):
        torch.cuda.init()
        torch.zeros(1, device="cuda:0")  # make the primary context current here
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.ptrs = []

    def alloc(self, dtype, shape):
        nbytes = max(1, math.prod(shape) * torch.tensor([], dtype=dtype).element_size())
        ptr = ctypes.c_uint64(0)
        self.assertOk(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
        handle = (ctypes.c_char * 64)()
        self.assertOk(self.lib.cuIpcGetMemHandle(handle, ctypes.c_uint64(ptr.value)))
        self.ptrs.append(ptr.value)
        wire = {torch.float32: "f32", torch.float64: "f64", torch.bfloat16: "bf16"}[dtype]
        spec = {"handle": bytes(handle).hex(), "dtype": wire, "shape": list(shape),
                "nbytes": math.prod(shape) * torch.tensor([], dtype=dtype).element_size()}
        view = torch.as_tensor(_DeviceBytes(ptr.value, spec["nbytes"]), device="cuda:0")
        return spec, view.view(dtype).view(list(shape))

    @staticmethod
    def assertOk(rc):
        if rc != 0:
            raise AssertionError(f"CUDA driver error {rc}")

    def free(self):
        torch.cuda.synchronize()
        for p in self.ptrs:
            self.lib.cuMemFree_v2(ctypes.c_uint64(p))


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class DeviceIoTests(WorkerTestCase):
    def test_case_made_exported_and_run_through_ipc(self):
        problem = self.files.write("9_CudaLinear.py", CUDA_PROBLEM)
        self.load_reference(problem, device="cuda:0")
        loaded, _ = self.load_candidate(as_candidate(CUDA_PROBLEM), problem, "fp32", "cuda:0")
        self.assertEqual(loaded["type"], "loaded", loaded)
        reply, tensors = self.ref.call({"cmd": "make_case", "seed": 7, "forward_seed": 11, "device_io": True})
        self.assertEqual(reply["type"], "case", reply)
        self.assertEqual(tensors, {})
        self.assertEqual(reply["inputs_on"], "cuda")
        specs = {d["name"]: d for d in reply["device_tensors"]}
        self.assertEqual(set(specs), {"in:0", "out:0", "out64:0"})
        self.assertEqual(specs["out64:0"]["dtype"], "f64")
        bufs = _HarnessBuffers()
        try:
            targets, views = [], {}
            for name, d in specs.items():
                dtype = {"f32": torch.float32, "f64": torch.float64}[d["dtype"]]
                spec, view = bufs.alloc(dtype, d["shape"])
                views[name] = view
                targets.append(dict(spec, name=name))
            reply, _ = self.ref.call({"cmd": "export", "targets": targets})
            self.assertEqual(reply["type"], "exported", reply)
            x, out, out64 = views["in:0"].clone(), views["out:0"].clone(), views["out64:0"].clone()
            self.assertTrue((x < 0).any())  # randn made on the GPU
            torch.testing.assert_close(out.double(), out64, atol=1e-4, rtol=1e-4)
            # A second export has nothing left to send.
            reply, _ = self.ref.call({"cmd": "export", "targets": targets})
            self.assertEqual(reply["type"], "error")

            # The candidate: inputs from a copy, outputs into a NaN-filled slot.
            in_spec, in_view = bufs.alloc(torch.float32, list(x.shape))
            in_view.copy_(x)
            slot_spec, slot = bufs.alloc(torch.float32, list(out.shape))
            slot.fill_(float("nan"))
            cmd = {"cmd": "run_case", "forward_seed": 11, "inputs": [{"tensor": "in:0"}],
                   "device_inputs": {"in:0": in_spec}, "device_outputs": [slot_spec]}
            reply, tensors = self.cand.call(cmd)
            self.assertEqual(reply["type"], "outputs", reply)
            self.assertEqual(reply["device_outputs"], [{"dtype": "f32", "shape": list(out.shape), "device": "cuda", "copied": True}])
            self.assert_bit_identical(slot.cpu(), out.cpu())
            # A slot of the wrong shape is described, not written.
            bad_spec, bad = bufs.alloc(torch.float32, [3])
            bad.fill_(1.0)
            reply, _ = self.cand.call(dict(cmd, device_outputs=[bad_spec]))
            self.assertFalse(reply["device_outputs"][0]["copied"])
            self.assertTrue(torch.equal(bad.cpu(), torch.ones(3)))
        finally:
            bufs.free()


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class CudaStressTests(WorkerTestCase):
    """Case families, stability and audit with inputs made on the GPU."""

    def export(self, reply):
        """Copies the pending device case into harness buffers; {name: host tensor}."""
        bufs = _HarnessBuffers()
        try:
            targets, views = [], {}
            for d in reply["device_tensors"]:
                dtype = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}[d["dtype"]]
                spec, view = bufs.alloc(dtype, d["shape"])
                views[d["name"]] = view
                targets.append(dict(spec, name=d["name"]))
            done, _ = self.ref.call({"cmd": "export", "targets": targets})
            self.assertEqual(done["type"], "exported", done)
            return {name: v.cpu() for name, v in views.items()}
        finally:
            bufs.free()

    def test_device_io_family_and_stability(self):
        problem = self.files.write("9_CudaLinear.py", CUDA_PROBLEM)
        self.load_reference(problem, device="cuda:0")
        cmd = {"cmd": "make_case", "seed": 7, "forward_seed": 11, "device_io": True,
               "family": "nan-inf", "stability_rtol": 1e-4}  # fmt: skip
        reply, _ = self.ref.call(cmd)
        self.assertEqual(reply["type"], "case", reply)
        self.assertEqual((reply["family"], reply["transformed"], reply["inputs_on"]), ("nan-inf", 1, "cuda"))
        st = reply["stability"]
        self.assertEqual(st["repeat"]["nan_mismatch"], 0)
        self.assertLessEqual(st["repeat"]["max_excess"], 0)
        self.assertEqual(st["repeat"]["elements"], 4096 * 1024)
        self.assertIsInstance(st["f64"]["nan_mismatch"], int)
        self.assertIsInstance(st["f64"]["max_excess"], float)
        a = self.export(reply)
        x = a["in:0"]
        self.assertEqual(int(torch.isnan(x).sum()), 1)
        self.assertEqual(int((x == math.inf).sum()), 1)
        self.assertEqual(int((x == -math.inf).sum()), 1)
        # same seed, same case on the same device
        reply, _ = self.ref.call(cmd)
        b = self.export(reply)
        for name in a:
            self.assert_bit_identical(a[name], b[name])

    def test_device_io_repeat_on_pristine_inputs(self):
        problem = self.files.write("14_InPlace.py", simple_problem("x.mul_(2)", "[torch.rand(1000, 1000)]"))
        self.load_reference(problem, device="cuda:0")
        for family in ("signed", "denormal", "cancellation"):
            with self.subTest(family=family):
                reply, _ = self.ref.call({"cmd": "make_case", "seed": 1, "forward_seed": 2, "device_io": True,
                                          "family": family, "stability_rtol": 0.0})  # fmt: skip
                self.assertEqual(reply["type"], "case", reply)
                self.assertLessEqual(reply["stability"]["repeat"]["max_excess"], 0)
                self.assertEqual(reply["stability"]["repeat"]["nan_mismatch"], 0)
                t = self.export(reply)
                self.assert_bit_identical(t["out:0"], t["in:0"] * 2)

    def test_audit_on_cuda(self):
        problem = self.files.write("21_ReLU.py", simple_problem("torch.relu(x)", "[torch.rand(256, 4096)]"))
        self.load_reference(problem, device="cuda:0", want_f64=False)
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4,
                                  "families": ["random", "signed"], "rtol": 1e-4})  # fmt: skip
        self.assertEqual(reply["type"], "audit", reply)
        fams = reply["families"]
        self.assertLessEqual(fams["random"]["outputs"][0]["input_excess"][0], 0)
        self.assertGreater(fams["signed"]["outputs"][0]["input_excess"][0], 1e-4)
        self.assertGreater(fams["signed"]["outputs"][0]["input_sensitivity"][0]["max_excess"], 1e-4)
        params = "self.w = nn.Parameter(torch.ones(4096))"
        problem = self.files.write("24_AddW.py", simple_problem("x + 0 * self.w", "[torch.rand(256, 4096)]", params=params))
        self.load_reference(problem, device="cuda:0", want_f64=False)
        reply, _ = self.ref.call({"cmd": "audit", "seed": 3, "forward_seed": 4, "families": ["signed"], "rtol": 1e-4})
        self.assertLessEqual(reply["families"]["signed"]["outputs"][0]["weight_sensitivity"]["w"]["max_excess"], 0)


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
        header = json.dumps({"cmd": "run_case", "tensors": [
            {"name": "x", "dtype": "f32", "shape": [4], "offset": 0, "nbytes": 16}]}).encode()
        w.send_raw(b"KBF1" + struct.pack("<IQ", len(header), 8) + header + bytes(8))
        reply, _ = w.recv()
        self.assertIn("outside the payload", reply["message"])
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



KERNELBENCH = os.environ.get(
    "KBENCH_KERNELBENCH_DIR",
    os.path.join(HERE, "..", "..", "..", "shared", "kernelbench"),
)


class CostAndProfileTests(WorkerTestCase):
    """The `cost` command (FLOPs and bytes of the reference) and `worker.py profile`."""

    def test_cost_of_a_linear_layer(self):
        self.load_reference(self.linear, want_f64=False)
        reply, tensors = self.ref.call({"cmd": "cost", "seed": 3, "forward_seed": 4, "id": 9})
        self.assertEqual((reply["type"], reply["id"]), ("cost", 9), reply)
        self.assertEqual(tensors, {})
        # x (4x16) @ W^T (16x8): 2·4·16·8 FLOPs; the bias add and relu are not counted.
        self.assertEqual(reply["flops"], 2 * 4 * 16 * 8)
        self.assertEqual(reply["flops_by_op"], {"aten.addmm": 2 * 4 * 16 * 8})
        self.assertEqual(reply["precision"], "fp32")
        self.assertEqual(reply["input_bytes"], 4 * 16 * 4)
        self.assertEqual(reply["weight_bytes"], (16 * 8 + 8) * 4)
        self.assertEqual(reply["output_bytes"], 4 * 8 * 4)
        # bf16 halves every byte count; the FLOPs stay.
        self.load_reference(self.linear, precision="bf16", want_f64=False)
        reply, _ = self.ref.call({"cmd": "cost", "seed": 3, "forward_seed": 4})
        self.assertEqual((reply["precision"], reply["input_bytes"]), ("bf16", 4 * 16 * 2))
        self.assertEqual(reply["flops"], 2 * 4 * 16 * 8)

    def test_cost_is_reference_only_and_needs_a_model(self):
        reply, _ = self.cand.call({"cmd": "cost", "seed": 1, "forward_seed": 1})
        self.assert_error(reply, "protocol", "run")
        self.assertIn("reference role only", reply["message"])

    def test_cost_of_a_real_kernelbench_matmul(self):
        problem = os.path.join(KERNELBENCH, "level1", "2_Standard_matrix_multiplication_.py")
        if not os.path.isfile(problem):
            self.skipTest(f"KernelBench not found at {KERNELBENCH}")
        # M=2048, K=8192, N=4096 in the problem file: 2·M·N·K FLOPs.
        self.load_reference(problem, want_f64=False)
        reply, _ = self.ref.call({"cmd": "cost", "seed": 1, "forward_seed": 1})
        m, k, n = 1024 * 2, 4096 * 2, 2048 * 2
        self.assertEqual(reply["flops"], 2 * m * n * k)
        self.assertEqual(reply["input_bytes"], 4 * (m * k + k * n))
        self.assertEqual(reply["output_bytes"], 4 * m * n)
        self.assertEqual(reply["weight_bytes"], 0)

    def _profile(self, **spec):
        out = os.path.join(self.files.dir.name, "profile.result.json")
        if os.path.exists(out):
            os.remove(out)
        spec_path = self.files.write("profile.spec.json", json.dumps(dict(spec, out_path=out)))
        code = subprocess.run([PYTHON, WORKER, "profile", spec_path], timeout=WATCHDOG_S).returncode
        with open(out) as f:
            return code, json.load(f)

    def test_profile_script_mode_with_the_torch_profiler_on_cpu(self):
        cand = self.files.write("cand_profile.py", """
import torch
class ModelNew(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)
    def forward(self, x):
        return torch.clamp(self.linear(x), min=0.0)
""")
        code, r = self._profile(problem_path=self.linear, candidate_path=cand, mode="torch",
                                device="cpu", calls=4, warmup=1)  # fmt: skip
        self.assertEqual(code, 0, r)
        self.assertEqual((r["role"], r["device"], r["calls"]), ("candidate", "cpu", 4))
        self.assertGreater(r["wall_s_per_call"], 0)
        names = {e["name"]: e for e in r["events"]}
        self.assertIn("aten::clamp", names, names)
        self.assertEqual(names["aten::clamp"]["count"], 4)
        self.assertTrue(all(e["kind"] == "cpu_op" for e in r["events"]))
        # load mode loads (and would build) the candidate and stops.
        code, r = self._profile(problem_path=self.linear, candidate_path=cand, mode="load", device="cpu")
        self.assertEqual((code, r["role"], r["mode"]), (0, "candidate", "load"), r)
        self.assertNotIn("calls", r)
        self.assertNotIn("wall_s_per_call", r)
        # cost mode profiles the reference only (candidate_path absent).
        code, r = self._profile(problem_path=self.linear, mode="cost", device="cpu")
        self.assertEqual((code, r["role"], r["cost"]["flops"]), (0, "reference", 2 * 4 * 16 * 8))
        # A candidate that raises: an error object naming it, non-zero exit.
        bad = self.files.write("cand_bad.py", "raise RuntimeError('nope')\n")
        code, r = self._profile(problem_path=self.linear, candidate_path=bad, mode="torch", device="cpu")
        self.assertNotEqual(code, 0)
        self.assertEqual(r["error"]["kind"], "compile_error", r)
        self.assertIn("cand_bad.py", r["error"]["message"])


class IntegrityProbeTests(WorkerTestCase):
    """Issue 6: the measurements behind the integrity flags (PROTOCOL.md, "Integrity")."""

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

    def test_timed_calls_get_fresh_addresses_and_checked_outputs(self):
        self.candidate("""
            seen = []

            class ModelNew(nn.Module):
                def forward(self, x):
                    seen.append(x.data_ptr())
                    # Tells the test how many distinct addresses it was given.
                    return x * 0 + len(set(seen))
        """)
        self.poisoned_run()
        reply, tensors = self.cand.call({"cmd": "time", "warmup": 1, "trials": 6, "forward_seed": 1,
                                         "check_calls": [0, 5]})  # fmt: skip
        self.assertEqual(reply["type"], "timing", reply)
        self.assertEqual(reply["checked_calls"], [0, 5])
        self.assertEqual(set(tensors), {"timed:0:out:0", "timed:5:out:0"})
        # 1 correctness call + 7 timed calls; at most three tensors alive at once, so the
        # addresses may repeat, but never two calls in a row at one address.
        self.assertGreaterEqual(float(tensors["timed:5:out:0"][0, 0]), 3)
        self.assertEqual(reply["integrity"], {"inputs_changed": [], "threads_started": 0, "tampered": []})

    def test_patched_clock_does_not_change_the_samples(self):
        self.candidate("""
            import time
            _real = time.perf_counter_ns
            time.perf_counter_ns = lambda: _real() // 1000

            class ModelNew(nn.Module):
                def forward(self, x):
                    time.sleep(0.002)
                    return x * x
        """)
        self.poisoned_run()
        reply, _ = self.cand.call({"cmd": "time", "warmup": 0, "trials": 3, "forward_seed": 1})
        self.assertTrue(all(s >= 1.9 for s in reply["samples_ms"]), reply["samples_ms"])
        self.assertEqual(reply["integrity"]["tampered"], ["time.perf_counter_ns"])

    def test_a_thread_finishing_the_output_after_return_is_seen(self):
        self.candidate("""
            import threading, time

            class ModelNew(nn.Module):
                def forward(self, x):
                    out = torch.zeros_like(x)

                    def late():
                        time.sleep(0.1)
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


if __name__ == "__main__":
    unittest.main()
