"""Device I/O (PROTOCOL.md, "Device I/O"): harness-owned GPU buffers, mapped through CUDA
IPC (the CUDA Python bindings), and the case commands' device variants (make_case and
run_case with device I/O, `export`)."""

import time

import numpy as np
import torch

from .cases import _json_value
from .integrity import _changed_inputs, input_checksums
from .protocol import (
    _ITEMSIZE,
    MAX_MESSAGE_CHARS,
    WorkerError,
    _clean_text,
    _describe,
    _field,
    _is_uint,
    driver_step,
)
from .tensors import _TORCH_OF, _check_sendable, _to_f64, _wire_dtype, flatten_outputs


class _Ipc:
    """cuIpcOpenMemHandle / cuIpcCloseMemHandle through the CUDA Python bindings (the
    `cuda-bindings` package that torch's CUDA wheels install; pinned in the lock).

    The harness allocates every buffer a worker fills or reads and sends its 64-byte IPC
    handle as 128 hex digits. A mapping lives only for the command that uses it."""

    _driver = None

    @classmethod
    def driver(cls, phase):
        if cls._driver is None:
            try:
                from cuda.bindings import driver
            except ImportError as exc:
                raise WorkerError(
                    "environment",
                    phase,
                    f"device I/O needs the CUDA Python bindings (the cuda-bindings package): {exc}; "
                    "`kbench setup` installs them, or `pip install cuda-bindings` matching the CUDA "
                    "major version of torch",
                ) from None
            cls._driver = driver
        return cls._driver

    @classmethod
    def open(cls, hex_handle, phase):
        driver = cls.driver(phase)
        if not (isinstance(hex_handle, str) and len(hex_handle) == 128):
            raise WorkerError("protocol", phase, f"bad IPC handle {hex_handle!r}")
        try:
            raw = np.frombuffer(bytes.fromhex(hex_handle), dtype=np.uint8).copy()
        except ValueError:
            raise WorkerError("protocol", phase, "IPC handle is not hex")
        # The bindings' CUipcMemHandle has no field setter: it is made over the 64 bytes,
        # which `raw` keeps alive through the call.
        handle = driver.CUipcMemHandle(_ptr=raw.ctypes.data)
        flags = driver.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        try:
            with driver_step("ipc_open"):
                err, ptr = driver.cuIpcOpenMemHandle(handle, flags)
        except Exception as exc:  # noqa: BLE001 (e.g. no driver library to load)
            raise WorkerError("environment", phase, f"cuIpcOpenMemHandle: {_describe(exc)}") from None
        del handle, raw
        if err != driver.CUresult.CUDA_SUCCESS:
            raise WorkerError("environment", phase, f"cuIpcOpenMemHandle failed: {err.name} ({int(err)})")
        return int(ptr)

    @classmethod
    def close(cls, ptr):
        with driver_step("ipc_close"):
            cls._driver.cuIpcCloseMemHandle(ptr)


class _DeviceBytes:
    """A raw device range as `__cuda_array_interface__`, so torch can view it without a copy."""

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 3, "strides": None,
        }  # fmt: skip


class _Mapped:
    """Harness buffers mapped for one command; unmapped (after a device sync) on exit."""

    def __init__(self, device, phase):
        self.device = device
        self.phase = phase
        self.ptrs = []

    def __enter__(self):
        return self

    def view(self, spec):
        """The buffer of `spec` ({handle, dtype, shape, nbytes}) as a tensor of its dtype."""
        dtype, shape, nbytes = spec.get("dtype"), spec.get("shape"), spec.get("nbytes")
        if dtype not in _ITEMSIZE or not isinstance(shape, list) or not all(_is_uint(d) for d in shape):
            raise WorkerError("protocol", self.phase, f"bad device tensor spec {spec!r}")
        numel = 1
        for d in shape:
            numel *= d
        if not _is_uint(nbytes) or numel * _ITEMSIZE[dtype] != nbytes:
            raise WorkerError("protocol", self.phase, f"device tensor spec {spec!r}: size does not match shape")
        if nbytes == 0:
            return torch.empty(shape, dtype=_TORCH_OF[dtype], device=self.device)
        ptr = _Ipc.open(spec.get("handle"), self.phase)
        self.ptrs.append(ptr)
        raw = torch.as_tensor(_DeviceBytes(ptr, nbytes), device=self.device)
        return raw.view(_TORCH_OF[dtype]).view(shape)

    def __exit__(self, *exc):
        with driver_step("sync"):
            torch.cuda.synchronize(self.device)
        for ptr in self.ptrs:
            _Ipc.close(ptr)
        self.ptrs = []
        return False


def _device_spec(name, t):
    return {"name": name, "dtype": _wire_dtype(t), "shape": list(t.shape), "nbytes": t.numel() * t.element_size()}


class DeviceCaseCommands:
    """The Worker's cases through harness buffers: `export`, and the device I/O variants of
    `make_case` and `run_case`."""

    def _make_device_case(self, inputs, forward_seed, inputs_on, inputs_s, stability_rtol=None, probe_tol=None):
        """make_case with device I/O: the case stays on the GPU, described by specs, until
        `export` copies it into the harness's buffers.

        Ordered for the GPU memory it holds at once (the reference shares the GPU with the
        candidate's worker and the harness's buffers): the working forward, the stability
        re-run and the probe runs first; then the working inputs give way to their pristine
        snapshot, and the float64 forward, the largest (its inputs, temporaries and outputs
        at twice the bytes), runs last on that snapshot. Seen on an H100 with a 6 GiB input
        (Softsign): the old order (float64 first) peaked at 72 GiB on nan-inf cases and ran
        out of memory beside the candidate."""
        args, pending, specs, pristine = [], {}, [], {}
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                _check_sendable(x, f"input {i}")
                name = f"in:{i}"
                # A snapshot before any forward: an in-place write by the model must not
                # change what candidates are given.
                pending[name] = pristine[i] = x.detach().contiguous().clone()
                specs.append(_device_spec(name, pending[name]))
                args.append({"tensor": name})
            else:
                args.append({"value": _json_value(x, i)})
        # The loop's variable would keep the last input alive past the swap below (6 GiB of
        # a level-1 problem's peak).
        x = None
        sums = input_checksums(inputs)
        out, run_s = self._forward(self.model, inputs, forward_seed, "run")
        changed = _changed_inputs(sums, inputs)
        if stability_rtol is None and probe_tol is None:
            outs = [t.detach().contiguous() for t in flatten_outputs(out)]
        else:
            # Copies of their own: an output may alias an input, which is restored before
            # the second run, or a buffer the model reuses.
            outs = [t.detach().clone(memory_format=torch.contiguous_format) for t in flatten_outputs(out)]
        del out
        reply = {"type": "case", "inputs": args, "run_s": run_s, "inputs_s": inputs_s, "inputs_on": inputs_on}
        if stability_rtol is not None:
            self._stability_repeat(reply, inputs, pristine, outs, forward_seed, stability_rtol)
        alts = []
        if probe_tol is not None:
            alts = self._probe_references(reply, inputs, pristine, outs, forward_seed, probe_tol)
        # From here the case's inputs are the pristine snapshot (what candidates get and
        # timing copies): the working tensors, which a forward may have written to, die.
        for i in pristine:
            inputs[i] = pristine[i]
        self._release_device_memory()
        outs64, f64_error = [], None
        t64 = time.perf_counter()
        if self.model64 is not None:
            try:
                args64 = [_to_f64(x) for x in inputs]
                out64, _ = self._forward(self.model64, args64, forward_seed, "run")
                del args64
                outs64 = [t.detach().contiguous() for t in flatten_outputs(out64)]
                del out64
            except WorkerError as exc:
                f64_error = exc.message
            except (Exception, SystemExit) as exc:
                f64_error = _describe(exc)
        f64_s = time.perf_counter() - t64  # _forward synchronized the device
        if self.model64 is not None:
            # The float64 forward's inputs and temporaries (twice the case's bytes) go back to
            # the driver now: the harness allocates its buffers for this case next, and with
            # them still cached a 16 GiB case (L1/45) could not be kept beside them on 80 GB.
            self._release_device_memory()
        if stability_rtol is not None:
            has64 = self.model64 is not None and f64_error is None
            self._stability_f64(reply, outs, outs64 if has64 else None, stability_rtol)
        self.poison = [{"dtype": _wire_dtype(t), "nbytes": t.numel() * t.element_size()} for t in outs]
        for k, t in enumerate(outs):
            pending[f"out:{k}"] = t
            specs.append(_device_spec(f"out:{k}", t))
        for k, t in enumerate(outs64):
            pending[f"out64:{k}"] = t
            specs.append(_device_spec(f"out64:{k}", t))
        for name, t in alts:
            pending[name] = t
            specs.append(_device_spec(name, t))
        self.pending = pending
        reply.update({
            "outputs": len(outs),
            "outputs_f64": len(outs64),
            "f64_s": f64_s,
            "device_tensors": specs,
            "inputs_changed": changed,
        })  # fmt: skip
        if f64_error is not None:
            reply["f64_error"] = _clean_text(f64_error, MAX_MESSAGE_CHARS)
        return reply, []

    def cmd_export(self, cmd, payload):
        """Copies the pending device case into the harness buffers named by `targets`."""
        if self.role != "reference":
            raise WorkerError("protocol", "run", "export is for the reference role only")
        targets = _field(cmd, "targets", list, "run")
        # "drop_case": the worker's current case (the inputs it keeps for timing) goes too,
        # for every case but the one timing uses: while the candidate runs on the same GPU,
        # what this trusted process keeps is memory an honest kernel may need.
        drop_case = bool(cmd.get("drop_case", False))
        if not self.pending and not (drop_case and not targets):
            raise WorkerError("protocol", "run", "nothing to export (send make_case with device_io first)")
        if drop_case:
            self.case = None
        # "partial": drop only the exported tensors and keep the rest pending, so the harness
        # can move a case one tensor at a time (the GPU then holds the case plus one tensor,
        # not two copies of it: multi-GB level-1 cases did not fit twice on an 80 GB H100).
        partial = bool(cmd.get("partial", False))
        with _Mapped(self.device, "run") as m:
            for spec in targets:
                name = spec.get("name") if isinstance(spec, dict) else None
                t = self.pending.get(name)
                if t is None:
                    raise WorkerError("protocol", "run", f"export target {name!r} is not in the pending case")
                dst = m.view(spec)
                if dst.shape != t.shape or dst.dtype != t.dtype:
                    raise WorkerError("protocol", "run", f"export target {name!r} does not match the tensor")
                dst.copy_(t)
                if partial:
                    del dst, t
                    del self.pending[name]
        # The loop's last tensor too (often out64, the largest), or it would still be
        # allocated when the release below decides what is cached.
        dst = t = None
        if not partial or not self.pending:
            self.pending = None
        # Every cached block goes back on the two paths that exist for a GPU short of memory:
        # a large case moved a tensor at a time (the harness allocates the next buffer right
        # after), and the drop with nothing to export that the harness sends before a case is
        # tried again beside a worker stopped for memory.
        self._release_device_memory(keep=0 if partial or (drop_case and not targets) else None)
        return {"type": "exported"}, []

    def _run_device_case(self, cmd, arg_specs, forward_seed):
        """run_case with device I/O: inputs are copied out of harness buffers into fresh
        tensors; each output goes into the harness's slot for it when its dtype and shape
        are the reference's (otherwise only its description is sent, which decides)."""
        if self.device.type != "cuda":
            raise WorkerError("protocol", "run", "device_inputs need a CUDA device")
        dev_in = _field(cmd, "device_inputs", dict, "run")
        slots = _field(cmd, "device_outputs", list, "run")
        args = []
        with _Mapped(self.device, "run") as m:
            for i, a in enumerate(arg_specs):
                if isinstance(a, dict) and len(a) == 1 and "tensor" in a:
                    spec = dev_in.get(a["tensor"])
                    if not isinstance(spec, dict):
                        raise WorkerError("protocol", "run", f"input {i} names tensor {a['tensor']!r}, not in device_inputs")
                    src = m.view(spec)
                    args.append(torch.empty_like(src).copy_(src))
                elif isinstance(a, dict) and len(a) == 1 and "value" in a:
                    args.append(a["value"])
                else:
                    raise WorkerError("protocol", "run", f"input {i} is neither {{tensor}} nor {{value}}: {a!r}")
        self.case = args
        out, run_s, probes = self._probed_forward(args, forward_seed)
        outs = flatten_outputs(out)
        del out
        described = copy_into_slots(outs, slots, self.device, "run")
        del outs
        if cmd.get("release_case"):
            self.case = args = None
        self._release_device_memory()
        return {
            "type": "outputs", "outputs": len(described), "run_s": run_s, "device_outputs": described,
            "integrity": probes,
        }, []


def copy_into_slots(outs, slots, device, phase):
    """Copies each output into the harness's slot for it (`slots`: specs shaped like the
    reference's outputs) when its dtype and shape are the slot's and it is on `device`;
    returns every output's description (`dtype`, `shape`, `device`, `copied`), which the
    harness judges where nothing was copied."""
    described = []
    with _Mapped(device, phase) as m:
        for k, t in enumerate(outs):
            d = {"dtype": _wire_dtype(t), "shape": list(t.shape), "device": t.device.type, "copied": False}
            slot = slots[k] if k < len(slots) else None
            if (
                isinstance(slot, dict)
                and t.device == device
                and d["dtype"] == slot.get("dtype")
                and d["shape"] == slot.get("shape")
            ):
                m.view(slot).copy_(t.detach())
                d["copied"] = True
            described.append(d)
    return described
