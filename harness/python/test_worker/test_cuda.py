"""On a CUDA GPU: cases and timing, and device I/O through CUDA IPC."""

import ctypes
import math
import os
import sys
import unittest

import torch

from .support import LINEAR_PROBLEM, WorkerTestCase, as_candidate, simple_problem


# A forward that is slow unless its output lies 6 MiB past a 256 MiB boundary (as some cuDNN
# kernels are slow in some placements of their memory), writing a line per call: the class,
# the pool of its output's segment (`memory_snapshot`) and the output's offset from the
# boundary. The candidate takes and frees odd-sized blocks at import, so its allocator's
# history differs from the reference's.
PLACED_PROBLEM = """
import torch
import torch.nn as nn

LOG = {log!r}

def where(t):
    p = t.data_ptr()
    for seg in torch.cuda.memory_snapshot():
        if seg["address"] <= p < seg["address"] + seg["total_size"]:
            return list(seg.get("segment_pool_id", ("?", "?"))), p % (256 << 20)
    return ["?", "?"], None

class Model(nn.Module):
    def forward(self, x):
        y = x * 2
        pool, offset = where(y)
        if offset != 6 << 20:
            torch.cuda._sleep(20_000_000)
        with open(LOG, "a") as f:
            f.write(f"{{type(self).__name__}} {{pool[0]}},{{pool[1]}} {{offset}}\\n")
        return y

def get_inputs():
    return [torch.rand(1024, 1024)]

def get_init_inputs():
    return []
"""

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
                dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
                bufs = _HarnessBuffers()
                try:
                    phase = _DevicePhase(bufs, [(dtype, [4096, 1024])], [(dtype, [4096, 1024])])
                    for side, w in (("reference", self.ref), ("candidate", self.cand)):
                        opened, _ = w.call(phase.open_cmd(side, [{"staged": 0}]))
                        self.assertEqual(opened["type"], "time_opened", opened)
                    pairs = timed_calls(self, self.ref, self.cand, phase, 20)
                    for k, name in enumerate(("reference", "candidate")):
                        samples = [p[k]["sample_ms"] for p in pairs]
                        self.assertTrue(all(p[k]["clock"] == "cuda_event" for p in pairs), pairs[0])
                        self.assertTrue(all(p[k]["outputs"][0]["copied"] for p in pairs), pairs[0])
                        self.assertTrue(all(s > 0 for s in samples))
                        print(f"\n{precision} {name} median {sorted(samples)[10]:.4f} ms", file=sys.stderr)
                    # Both sides computed the same call: the same outputs.
                    self.assert_bit_identical(phase.outputs["candidate"][0][1].cpu(), phase.outputs["reference"][0][1].cpu())
                    for w in (self.ref, self.cand):
                        closed, _ = w.call({"cmd": "time_close"})
                        self.assertEqual(closed["type"], "time_closed", closed)
                finally:
                    bufs.free()

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
        bufs = _HarnessBuffers()
        try:
            phase = _DevicePhase(bufs, [(torch.float32, [4, 16])], [(torch.float32, [4, 16])])
            for side, w in (("reference", self.ref), ("candidate", self.cand)):
                opened, _ = w.call(phase.open_cmd(side, [{"staged": 0}]))
                self.assertEqual(opened["type"], "time_opened", opened)
            pairs = timed_calls(self, self.ref, self.cand, phase, 3)
            # 20 fp32 4096^3 matmuls: well over a millisecond on any GPU
            self.assertGreater(min(p[1]["sample_ms"] for p in pairs), 1.0, pairs)
            for w in (self.ref, self.cand):
                w.call({"cmd": "time_close"})
        finally:
            bufs.free()


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
        self.ptrs = []


class _DevicePhase:
    """A timing phase on the GPU as the harness runs it, from this test process: source,
    staged and output buffers (IPC), the reference's draw copied into a side's staged inputs
    before its call."""

    def __init__(self, bufs, inputs, outputs):
        self.bufs = bufs
        alloc = lambda layouts: [bufs.alloc(dtype, shape) for dtype, shape in layouts]
        self.source = alloc(inputs)
        self.staged = {side: alloc(inputs) for side in ("reference", "candidate")}
        self.outputs = {side: alloc(outputs) for side in ("reference", "candidate")}

    def open_cmd(self, side, args, forward_seed=11):
        cmd = {"cmd": "time_open", "args": args, "forward_seed": forward_seed,
               "staged": [s for s, _ in self.staged[side]], "outputs": [s for s, _ in self.outputs[side]]}  # fmt: skip
        if side == "reference":
            cmd["source"] = [[s for s, _ in self.source]]
        return cmd

    def stage(self, side):
        for (_, dst), (_, src) in zip(self.staged[side], self.source):
            dst.copy_(src)
        for _, out in self.outputs[side]:
            out.view(torch.uint8).fill_(0xFF)
        torch.cuda.synchronize()  # as the harness does: done before the worker runs


def opening_call(w):
    """One untimed opening call on the worker's current case, in an empty timing phase: what
    tells whether the worker still keeps its case for timing."""
    opened, _ = w.call({"cmd": "time_open", "args": [], "staged": [], "outputs": [], "source": [], "forward_seed": 0})
    assert opened["type"] == "time_opened", opened
    reply, tensors = w.call({"cmd": "timed_call", "round_warmup": 1})
    w.call({"cmd": "time_close", "release": False})
    return reply, tensors


def timed_calls(case, ref, cand, phase, n, seed0=100):
    """`n` timed calls on both workers (fresh inputs from the reference each); the replies."""
    replies = []
    for i in range(n):
        staged, _ = ref.call({"cmd": "stage_inputs", "seeds": [seed0 + i]})
        case.assertEqual(staged["type"], "staged", staged)
        pair = []
        for side, w in (("reference", ref), ("candidate", cand)):
            phase.stage(side)
            reply, _ = w.call({"cmd": "timed_call"})
            pair.append(reply)
        replies.append(pair)
    return replies


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
            # The reference keeps the case's inputs for timing until told to drop them
            # ("drop_case", with nothing pending and no targets); then timing is refused.
            timed, _ = opening_call(self.ref)
            self.assertEqual(timed["type"], "opened", timed)
            reply, _ = self.ref.call({"cmd": "export", "targets": [], "drop_case": True})
            self.assertEqual(reply["type"], "exported", reply)
            timed, _ = opening_call(self.ref)
            self.assertEqual(timed["type"], "error", timed)
            self.assertIn("need a current case", timed["message"])
            # drop_case on the exports of a case: the same tensors arrive, and no case stays.
            reply, _ = self.ref.call({"cmd": "make_case", "seed": 7, "forward_seed": 11, "device_io": True})
            self.assertEqual(reply["type"], "case", reply)
            for target in targets:
                reply, _ = self.ref.call({"cmd": "export", "targets": [target], "partial": True, "drop_case": True})
                self.assertEqual(reply["type"], "exported", reply)
            self.assert_bit_identical(views["in:0"].cpu(), x.cpu())
            self.assert_bit_identical(views["out:0"].cpu(), out.cpu())
            timed, _ = opening_call(self.ref)
            self.assertEqual(timed["type"], "error", timed)

            # The candidate: inputs from a copy, outputs into a NaN-filled slot.
            in_spec, in_view = bufs.alloc(torch.float32, list(x.shape))
            in_view.copy_(x)
            slot_spec, slot = bufs.alloc(torch.float32, list(out.shape))
            slot.fill_(float("nan"))
            torch.cuda.synchronize()  # as the harness does: done before the handle goes out
            cmd = {"cmd": "run_case", "forward_seed": 11, "inputs": [{"tensor": "in:0"}],
                   "device_inputs": {"in:0": in_spec}, "device_outputs": [slot_spec]}
            reply, tensors = self.cand.call(cmd)
            self.assertEqual(reply["type"], "outputs", reply)
            self.assertEqual(reply["device_outputs"], [{"dtype": "f32", "shape": list(out.shape), "device": "cuda", "copied": True}])
            self.assert_bit_identical(slot.cpu(), out.cpu())
            # A slot of the wrong shape is described, not written.
            bad_spec, bad = bufs.alloc(torch.float32, [3])
            bad.fill_(1.0)
            torch.cuda.synchronize()  # as the harness does: done before the handle goes out
            reply, _ = self.cand.call(dict(cmd, device_outputs=[bad_spec]))
            self.assertFalse(reply["device_outputs"][0]["copied"])
            self.assertTrue(torch.equal(bad.cpu(), torch.ones(3)))
            # The case stays for timing; with release_case (stress cases, after timing) the
            # worker keeps no copy of it, and timing it is refused.
            timed, _ = opening_call(self.cand)
            self.assertEqual(timed["type"], "opened", timed)
            reply, _ = self.cand.call(dict(cmd, release_case=True))
            self.assertEqual(reply["type"], "outputs", reply)
            self.assert_bit_identical(slot.cpu(), out.cpu())
            timed, _ = opening_call(self.cand)
            self.assertEqual(timed["type"], "error", timed)
            self.assertIn("need a current case", timed["message"])
        finally:
            bufs.free()

    def test_made_case_holds_only_its_tensors(self):
        # After make_case the harness allocates its buffers for the case: the reference's
        # float64 forward (inputs and temporaries twice the case's bytes) must not stay cached
        # in its allocator then when the GPU is short of memory (L1/45's 16 GiB case did not
        # fit beside them on 80 GB). The reference's worker keeps its free blocks only while
        # the GPU's free memory is at least its reservation plus an eighth of the GPU
        # (session.should_release): a tensor of this process leaves a little more than that
        # eighth free, so this case's float64 input copy (2 GiB) must go back.
        big = CUDA_PROBLEM.replace("batch_size = 4096", "batch_size = 262144")
        problem = self.files.write("9_CudaLinearBig.py", big)
        self.load_reference(problem, device="cuda:0")
        free, total = torch.cuda.mem_get_info(0)
        if free < total // 8 + (12 << 30):
            self.skipTest(f"the GPU has {free >> 30} GiB free; the test needs an eighth of it and 12 GiB")
        # Held in a list the cleanup empties: the tensor's last reference goes with it (a
        # resize to 0 would keep the storage), then its blocks go back to the driver.
        blocker = [torch.empty(free - (total // 8 + (6 << 30)), dtype=torch.uint8, device="cuda:0")]
        self.addCleanup(torch.cuda.empty_cache)
        self.addCleanup(blocker.clear)
        bufs = _HarnessBuffers()
        try:
            mib = 1 << 20
            for seed in (7, 8):
                free_before = torch.cuda.mem_get_info(0)[0]
                reply, _ = self.ref.call({"cmd": "make_case", "seed": seed, "forward_seed": 11, "device_io": True})
                self.assertEqual(reply["type"], "case", reply)
                held = free_before - torch.cuda.mem_get_info(0)[0]
                pending = sum(d["nbytes"] for d in reply["device_tensors"])
                # in:0 1 GiB, out:0 1 GiB, out64:0 2 GiB; the float64 input copy (2 GiB)
                # must be gone. The first case may also create cuBLAS's handles.
                if seed == 8:
                    self.assertLessEqual(held, pending + 64 * mib, (held / mib, pending / mib))
                targets = []
                for d in reply["device_tensors"]:
                    dtype = {"f32": torch.float32, "f64": torch.float64}[d["dtype"]]
                    spec, _ = bufs.alloc(dtype, d["shape"])
                    targets.append(dict(spec, name=d["name"]))
                reply, _ = self.ref.call({"cmd": "export", "targets": targets, "drop_case": True})
                self.assertEqual(reply["type"], "exported", reply)
                bufs.free()
        finally:
            bufs.free()

    def test_small_cases_keep_their_blocks_until_a_drop(self):
        # Between commands a worker keeps free blocks cached (up to 1 GiB whatever the GPU
        # holds, more while the GPU has room for them), so a small case's next one reuses
        # them instead of freeing and allocating again through the driver; the drop the
        # harness sends after a candidate ran out of memory beside the reference (export with
        # no target and drop_case) gives every block back.
        problem = self.files.write("9_CudaLinear.py", CUDA_PROBLEM)
        self.load_reference(problem, device="cuda:0")
        bufs = _HarnessBuffers()
        try:
            mib = 1 << 20
            reply, _ = self.ref.call({"cmd": "make_case", "seed": 7, "forward_seed": 11, "device_io": True})
            self.assertEqual(reply["type"], "case", reply)
            targets = []
            for d in reply["device_tensors"]:
                dtype = {"f32": torch.float32, "f64": torch.float64}[d["dtype"]]
                spec, _ = bufs.alloc(dtype, d["shape"])
                targets.append(dict(spec, name=d["name"]))
            # The whole small case in one export, as the harness sends it.
            reply, _ = self.ref.call({"cmd": "export", "targets": targets})
            self.assertEqual(reply["type"], "exported", reply)
            torch.cuda.synchronize()
            free_kept = torch.cuda.mem_get_info(0)[0]
            reply, _ = self.ref.call({"cmd": "export", "targets": [], "drop_case": True})
            self.assertEqual(reply["type"], "exported", reply)
            # Cached until the drop: the exported out:0 and the working input (16 MiB each),
            # out64:0 and the float64 input copy (32 MiB each); in:0, the worker's current
            # case, is freed by the drop (16 MiB). Emptied after every command as before, only
            # in:0 and out64:0 (the export's last tensor) would come back.
            given_back = torch.cuda.mem_get_info(0)[0] - free_kept
            self.assertGreaterEqual(given_back, 64 * mib, given_back / mib)
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

    def test_device_io_probe_references(self):
        # diag(A) @ B on the GPU: the probe reference is pending beside the outputs.
        problem = self.files.write("12_CudaDiag.py", simple_problem(
            "torch.diag(x) @ rest[0]", "[torch.rand(64), torch.rand(64, 48)]"))  # fmt: skip
        self.load_reference(problem, device="cuda:0", want_f64=False)
        reply, _ = self.ref.call({"cmd": "make_case", "seed": 3, "forward_seed": 4, "device_io": True,
                                  "family": "nan-inf", "probe_rtol": 1e-4, "probe_atol": 1e-4})  # fmt: skip
        self.assertEqual(reply["type"], "case", reply)
        self.assertEqual(reply["outputs_alt"], 1, reply)
        t = self.export(reply)
        a, b, out, alt = t["in:0"], t["in:1"], t["out:0"], t["outalt:0"]
        depends = ~torch.isfinite(a).unsqueeze(1) | ~torch.isfinite(b)
        self.assertTrue(torch.isnan(alt[depends]).all())
        torch.testing.assert_close(alt[~depends], (a.unsqueeze(1) * b)[~depends])
        self.assertGreater(int((~torch.isfinite(out) & torch.isfinite(alt)).sum()), 20)

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
                # The float64 forward runs last, on the pristine snapshot, not on the inputs
                # the working forward doubled in place.
                self.assert_bit_identical(t["out64:0"], t["in:0"].double() * 2)
                timed, _ = opening_call(self.ref)
                self.assertEqual(timed["type"], "opened", timed)

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


@unittest.skipUnless(torch.cuda.is_available(), "needs a CUDA GPU")
class PlacementTests(WorkerTestCase):
    def test_calls_use_staged_sets_in_turn_and_hold_their_outputs(self):
        # Two staged sets used in turn, two outputs held: each call computes on the set it
        # names, and a held output's block is not the next call's.
        problem = self.files.write("9_CudaLinear.py", CUDA_PROBLEM)
        self.load_reference(problem, device="cuda:0")
        loaded, _ = self.load_candidate(as_candidate(CUDA_PROBLEM), problem, device="cuda:0")
        self.assertEqual(loaded["type"], "loaded", loaded)
        self.make_case()
        bufs = _HarnessBuffers()
        try:
            layout = [(torch.float32, [4096, 1024])]
            phase = _DevicePhase(bufs, layout, layout)
            second = {side: [bufs.alloc(d, s) for d, s in layout] for side in ("reference", "candidate")}
            for side, w in (("reference", self.ref), ("candidate", self.cand)):
                cmd = phase.open_cmd(side, [{"staged": 0}])
                cmd["staged_sets"] = [[s for s, _ in second[side]]]
                cmd["hold_outputs"] = 2
                opened, _ = w.call(cmd)
                self.assertEqual(opened["type"], "time_opened", opened)
            for i in range(4):
                staged, _ = self.ref.call({"cmd": "stage_inputs", "seeds": [200 + i]})
                self.assertEqual(staged["type"], "staged", staged)
                outs = []
                for side, w in (("reference", self.ref), ("candidate", self.cand)):
                    # Set 1 holds this call's values, set 0 stale ones (or zeros).
                    for (_, dst), (_, src) in zip(second[side], phase.source):
                        dst.copy_(src)
                    for (_, s), (_, src) in zip(phase.staged[side], phase.source):
                        s.zero_()
                    torch.cuda.synchronize()
                    reply, _ = w.call({"cmd": "timed_call", "staged_set": 1})
                    self.assertEqual(reply["type"], "timed_call", reply)
                    outs.append(phase.outputs[side][0][1].clone())
                self.assert_bit_identical(outs[0].cpu(), outs[1].cpu())
                self.assertGreater(outs[0].abs().sum().item(), 0, "computed on set 1, not the zeros")
            reply, _ = self.cand.call({"cmd": "timed_call", "staged_set": 2})
            self.assert_error(reply, "protocol", "time")
            for w in (self.ref, self.cand):
                closed, _ = w.call({"cmd": "time_close"})
                self.assertEqual(closed["type"], "time_closed", closed)
        finally:
            bufs.free()

    @unittest.skipUnless(hasattr(torch.cuda, "MemPool"), "this torch has no allocator pools")
    def test_each_side_times_its_calls_in_its_fastest_placement(self):
        # time_open tries placements of the calls' memory in a pool of the phase's own and
        # keeps the fastest: every later call of either side, whatever its allocator's
        # history, allocates there (6 MiB past the boundary) and runs fast.
        log = os.path.join(self.files.dir.name, "where.log")
        source = PLACED_PROBLEM.format(log=log)
        problem = self.files.write("19_Placed.py", source)
        self.load_reference(problem, device="cuda:0")
        fragment = "\n_odd = [torch.empty(n, device='cuda') for n in (300_001, 5_000_017, 77)]\ndel _odd[1]\n"
        loaded, _ = self.load_candidate(as_candidate(source) + fragment, problem, device="cuda:0")
        self.assertEqual(loaded["type"], "loaded", loaded)
        case, t = self.make_case()
        self.run_case(case, t)
        bufs = _HarnessBuffers()
        try:
            layout = [(torch.float32, [1024, 1024])]
            phase = _DevicePhase(bufs, layout, layout)
            for side, w in (("reference", self.ref), ("candidate", self.cand)):
                cmd = phase.open_cmd(side, [{"staged": 0}])
                cmd["hold_outputs"] = 2
                opened, _ = w.call(cmd)
                self.assertEqual(opened["type"], "time_opened", opened)
                tried = opened["placements"]
                self.assertEqual([o for o, _ in tried], [k << 21 for k in range(len(tried))], tried)
                self.assertGreater(len(tried), 3, tried)
                self.assertEqual(min(tried, key=lambda p: p[1])[0], 6 << 20, tried)
                self.assertEqual(opened["calls"], 1 + 3 * len(tried), opened)
            os.truncate(log, 0)
            for w in (self.ref, self.cand):
                opened, _ = w.call({"cmd": "timed_call", "round_warmup": 1})
                self.assertEqual(opened["type"], "opened", opened)
            replies = timed_calls(self, self.ref, self.cand, phase, 4)
            for pair in replies:
                for reply in pair:
                    self.assertLess(reply["sample_ms"], 5.0, reply)
            with open(log) as f:
                lines = [line.split() for line in f]
            for name in ("Model", "ModelNew"):
                seen = [(pool, off) for who, pool, off in lines if who == name]
                self.assertEqual(len(seen), 5, lines)
                self.assertTrue(all(pool not in ("0,0", "?,?") and off == str(6 << 20) for pool, off in seen), (name, seen))
            for w in (self.ref, self.cand):
                closed, _ = w.call({"cmd": "time_close"})
                self.assertEqual(closed["type"], "time_closed", closed)
        finally:
            bufs.free()
