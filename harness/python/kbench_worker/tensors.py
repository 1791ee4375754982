"""Tensors: wire dtypes and payload tensors, the casting rule, output checks, host copies,
seeding."""

import random

import numpy as np
import torch

from .protocol import _ITEMSIZE, WorkerError


_WIRE_OF = {}  # torch dtype -> wire name, filled once torch is imported
_TORCH_OF = {}  # wire name -> torch dtype


def _init_dtype_tables():
    pairs = [
        (torch.float64, "f64"), (torch.float32, "f32"), (torch.float16, "f16"),
        (torch.bfloat16, "bf16"), (torch.int64, "i64"), (torch.int32, "i32"),
        (torch.int16, "i16"), (torch.int8, "i8"), (torch.uint8, "u8"), (torch.bool, "bool"),
    ]  # fmt: skip
    for dt, name in pairs:
        _WIRE_OF[dt] = name
        _TORCH_OF[name] = dt


def _wire_dtype(t):
    return _WIRE_OF[t.dtype]


def _tensor_bytes(t):
    """The raw little-endian bytes of a contiguous CPU tensor, as a memoryview (no copy).

    Viewing as uint8 first sidesteps numpy's missing bfloat16 and keeps bool as 0/1 bytes.
    """
    flat = t.reshape(-1)
    if flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)
    return memoryview(flat.numpy())


def _tensor_from_payload(payload, spec, device):
    """Builds an owned tensor on `device` from a checked spec (copies out of the payload)."""
    dtype = spec["dtype"]
    shape = spec["shape"]
    numel = spec["nbytes"] // _ITEMSIZE[dtype]
    if numel == 0:
        return torch.empty(shape, dtype=_TORCH_OF[dtype], device=device)
    # Payload offsets need not be aligned for the dtype: take the bytes, copy them into
    # fresh (aligned, owned) memory on the device, then reinterpret. bool bytes are
    # normalised to 0/1.
    raw = torch.frombuffer(payload, dtype=torch.uint8, count=spec["nbytes"], offset=spec["offset"])
    if dtype == "bool":
        t = raw.ne(0).to(device)
    else:
        t = raw.to(device, copy=True).view(_TORCH_OF[dtype])
    return t.reshape(shape)


# ---------------------------------------------------------------------------------------
# Casting, output checks, host copies


def _precision_dtype(name):
    table = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    if name not in table:
        raise WorkerError("protocol", "load", f"unknown precision {name!r} (fp32, fp16, bf16)")
    return table[name]


def _precision_name(dtype):
    return {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(dtype, str(dtype))


def cast(x, device, dtype):
    """PROTOCOL.md casting rule: floating tensors to the working dtype and device; integer
    and bool tensors only to the device (KernelBench HEAD casts them too: its bug #151)."""
    if isinstance(x, torch.Tensor):
        if x.is_floating_point():
            return x.to(device=device, dtype=dtype)
        return x.to(device=device)
    return x


def _to_f64(x):
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.to(torch.float64)
    return x


def _check_sendable(t, what):
    """Raises bad_output unless `t` is a plain dense tensor of a wire dtype. (A tensor
    subclass could compute lazily, or lie about its contents, so none is accepted.)"""
    flag = "non-plain-output"
    if type(t) is not torch.Tensor:
        raise WorkerError(
            "bad_output", None, f"{what} is a {type(t).__module__}.{type(t).__qualname__}, "
            "not a plain torch.Tensor", integrity=flag,
        )
    if t.layout != torch.strided:
        raise WorkerError("bad_output", None, f"{what} has layout {t.layout}; only dense tensors travel", integrity=flag)
    if t.is_nested:
        raise WorkerError("bad_output", None, f"{what} is a nested tensor", integrity=flag)
    if t.device.type == "meta":
        raise WorkerError("bad_output", None, f"{what} is a meta tensor (it holds no data)", integrity=flag)
    if t.dtype not in _WIRE_OF:
        raise WorkerError(
            "bad_output", None,
            f"{what} has dtype {t.dtype}, which kbench cannot compare "
            f"(supported: {', '.join(_ITEMSIZE)})",
        )


def _host_copy(t, snapshot):
    """Contiguous CPU copy for sending. With `snapshot`, a CPU tensor is copied too, so a
    later in-place write by the model cannot change what is sent."""
    t = t.detach().resolve_conj().resolve_neg()
    if snapshot or t.device.type != "cpu":
        return t.to("cpu", memory_format=torch.contiguous_format, copy=True)
    return t.contiguous()


def copy_outputs(out):
    """A forward's result with every tensor copied (tuples and lists rebuilt in order, other
    values as they are): outputs that stay valid whatever the model's next call does."""
    if isinstance(out, torch.Tensor):
        return out.detach().clone()
    if isinstance(out, (tuple, list)):
        return [copy_outputs(x) for x in out] if isinstance(out, list) else tuple(copy_outputs(x) for x in out)
    return out


def flatten_outputs(out):
    """forward's result as a flat list of checked tensors (tuples/lists flattened in order)."""
    # Depth-first with a stack, not a nested function calling itself: such a closure is a
    # reference cycle holding `flat`, so every call's outputs stayed alive until a garbage
    # collection (timing disables it: 42 GiB of leaked outputs ran a worker out of memory).
    flat = []
    stack = [(out, "output")]
    while stack:
        x, path = stack.pop()
        if isinstance(x, (tuple, list)):
            stack.extend(reversed([(item, f"{path}[{i}]") for i, item in enumerate(x)]))
        else:
            flat.append((x, path))
    must = "forward must return a torch.Tensor or a tuple/list of tensors"
    if not any(isinstance(x, torch.Tensor) for x, _ in flat):
        # Said plainly: a Python or numpy number is no tensor, whatever its dtype is called.
        if not flat:
            what = f"an empty {type(out).__name__}" if len(out) == 0 else f"a {type(out).__name__} of empty containers"
        elif isinstance(out, (tuple, list)):
            what = ", ".join(f"{_kind_of(x)} as {path}" for x, path in flat[:4]) + (", ..." if len(flat) > 4 else "")
        else:
            what = _kind_of(out)
        raise WorkerError("bad_output", None, f"forward returned no tensor, only {what}: {must}")
    for x, path in flat:
        if not isinstance(x, torch.Tensor):
            raise WorkerError("bad_output", None, f"forward returned {_kind_of(x)} as {path}, not a tensor: {must}")
        _check_sendable(x, path)
    return [x for x, _ in flat]


def _kind_of(x):
    """`a Python float (builtins.float)`: what a non-tensor value is, by its type's name."""
    if x is None:
        return "None"
    t = type(x)
    origin = "Python" if t.__module__ == "builtins" else t.__module__.split(".")[0]
    return f"a {origin} {t.__qualname__} ({t.__module__}.{t.__qualname__})"


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seed_forward(seed, device):
    """Seeds what a forward may draw from (torch's generator of the CPU, and of `device` on a
    GPU; Python's and numpy's) before a timed call: what `seed_all` seeds, without
    `torch.manual_seed`'s walk over every device type (about 0.2 ms a call, inside the
    harness's timed window)."""
    seed = int(seed)
    torch.default_generator.manual_seed(seed)
    if device.type == "cuda":
        torch.cuda.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (1 << 32))


def seed_all(seed):
    """torch.manual_seed seeds the CPU and every CUDA device. Python's and numpy's RNGs are
    seeded too so a get_inputs that uses them is still a function of the seed."""
    seed = int(seed)
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
