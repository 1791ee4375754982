"""The test client of the worker: a worker subprocess speaking the framed protocol of
PROTOCOL.md, the problems the tests load, and the base class that starts a reference and a
candidate worker for a test class."""

import json
import os
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest

import safetensors.torch
import torch


# harness/python: the worker package's parent folder.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The worker package is started as `python -m kbench_worker` from its parent folder.
WORKER = ["-m", "kbench_worker"]
PYTHON = os.environ.get("KBENCH_TEST_PYTHON", sys.executable)
# A worker still alive this many seconds after it started is killed and the test fails: a
# guard against hangs, not a time limit on the work. A test class's workers live for all of
# its tests (test_cost's 25 s alone); beside other tests on CI's 2 cores, 60 s killed them.
WATCHDOG_S = 300


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


def encode_payload(tensors, pad=0):
    """A safetensors payload made by the safetensors package (the reference writer), or b""
    without tensors. `pad` extra spaces in its header make every data offset unaligned."""
    if not tensors:
        return b""
    buf = safetensors.torch.save({name: t.detach().contiguous().cpu() for name, t in tensors})
    if pad:
        n = int.from_bytes(buf[:8], "little")
        buf = (n + pad).to_bytes(8, "little") + buf[8 : 8 + n] + b" " * pad + buf[8 + n :]
    return buf


def encode_frame(header, tensors=(), pad=0):
    payload = encode_payload(tensors, pad)
    raw = json.dumps(header).encode()
    return b"KBF1" + struct.pack("<IQ", len(raw), len(payload)) + raw + payload


class Worker:
    """A worker subprocess and a tiny frame client."""

    def __init__(self, role, env=None, args=None):
        self.stderr = tempfile.TemporaryFile()
        argv = [PYTHON, "-u", *WORKER] + ([role] if args is None else args)
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=HERE
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
        # Parsed by the safetensors package, which checks the layout strictly.
        tensors = dict(safetensors.torch.load(payload)) if payload else {}
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
                                  "want_f64": want_f64, "cpu_threads": 1})  # fmt: skip
        self.assertEqual(reply["type"], "loaded", reply)
        return reply

    def load_candidate(self, source, problem=None, precision="fp32", device="cpu", **extra):
        type(self).n_candidates += 1
        path = self.files.write(f"cand_{self.n_candidates}.py", source)
        build = os.path.join(self.files.dir.name, "build")
        reply, _ = self.cand.call({"cmd": "load", "problem_path": problem or self.linear,
                                   "candidate_path": path, "device": device,
                                   "precision": precision, "weight_seed": 42,
                                   "cpu_threads": 1, "build_dir": build, **extra})  # fmt: skip
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
