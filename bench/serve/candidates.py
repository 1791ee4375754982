"""Candidates for the serve benchmark (Python 3 standard library only).

- PyTorch: a KernelBench problem's own `Model` renamed `ModelNew` (what `kbench run --agent
  reference` submits: correct by construction), headed by a comment that makes every source
  distinct (the bench's nonce and the candidate's index), so none is answered from the
  verdict cache of an earlier run.
- Triton: hand-written elementwise kernels for level-1 problems 19-32 (ReLU, LeakyReLU,
  Sigmoid, Tanh, Swish, GELU, HardSigmoid, Softsign, ELU, HardTanh), each a `ModelNew` whose
  forward launches one @triton.jit kernel over the flattened input. They compute in fp32 and
  keep NaN, ±Inf and subnormal inputs as the reference does (kbench's stress families test
  that): a `where` on `x < 0` rather than `x > 0` lets NaN through, small arguments of tanh
  and expm1 take their Taylor series instead of losing them to `exp(x) - 1`, and Softsign
  divides with `div_rn` (IEEE, subnormals kept).
- Published: kernel files already on disk, in the layouts `kbench import` and replay read.
"""

import json
import re
from pathlib import Path

PROBLEM_FILE = re.compile(r"^(\d+)_(.+)\.py$")


def level_dir(kernelbench, level):
    """A KernelBench checkout's `KernelBench/level<L>/`, or a folder's own `level<L>/`."""
    kb = Path(kernelbench)
    for d in (kb / "KernelBench" / f"level{level}", kb / f"level{level}"):
        if d.is_dir():
            return d
    raise FileNotFoundError(
        f"{kb} has neither KernelBench/level{level}/ nor level{level}/: pass a KernelBench checkout"
    )


def problem_files(folder):
    """[(id, name, path)] of `<id>_<name>.py` files in `folder`, by id."""
    out = []
    for p in Path(folder).iterdir():
        m = PROBLEM_FILE.match(p.name)
        if m and p.is_file():
            out.append((int(m.group(1)), m.group(2), p))
    return sorted(out)


_MODEL = re.compile(r"(?<!\w)Model(?!\w)")


def rename_model(source):
    """`Model` → `ModelNew` at identifier boundaries (harness/src/agents/mod.rs,
    `rename_identifier`): `class Model`, `super(Model, self)`; `MyModel` and `ModelX` stay."""
    return _MODEL.sub("ModelNew", source)


def header(nonce, index, kind, level, pid):
    return f"# kbench serve bench {nonce}: candidate {index} ({kind}, L{level}/{pid})\n"


# --- Triton ---------------------------------------------------------------------------------

_TRITON_TEMPLATE = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def {name}_kernel(x_ptr, out_ptr, n{params}, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
{body}
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self{init_sig}):
        super().__init__()
{init_body}
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        BLOCK = 1024
        {name}_kernel[(triton.cdiv(n, BLOCK),)](x, out, n{args}, BLOCK=BLOCK)
        return out
'''

# problem id -> (kernel name, body lines computing y from x, constructor parameter or None,
# the call the problem's forward makes, which the self-test looks for in the problem file).
# A parameter is (name, default): a float passed to the kernel.
TRITON_KERNELS = {
    19: ("relu", ["y = tl.where(x < 0.0, 0.0, x)"], None, "torch.relu"),
    20: (
        "leaky_relu",
        ["y = tl.where(x < 0.0, x * negative_slope, x)"],
        ("negative_slope", "0.01"),
        "leaky_relu",
    ),
    21: ("sigmoid", ["y = 1.0 / (1.0 + tl.exp(-x))"], None, "torch.sigmoid"),
    22: (
        "tanh",
        [
            "a = tl.abs(x)",
            "t = tl.exp(-2.0 * a)",
            "r = tl.where(a < 1e-4, a, (1.0 - t) / (1.0 + t))",
            "y = tl.where(x < 0.0, -r, r)",
        ],
        None,
        "torch.tanh",
    ),
    25: ("swish", ["y = x * (1.0 / (1.0 + tl.exp(-x)))"], None, "x * torch.sigmoid(x)"),
    26: ("gelu", ["y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))"], None, "gelu"),
    28: (
        "hardsigmoid",
        ["y = tl.where(x <= -3.0, 0.0, tl.where(x >= 3.0, 1.0, x / 6.0 + 0.5))"],
        None,
        "hardsigmoid",
    ),
    30: ("softsign", ["y = tl.math.div_rn(x, 1.0 + tl.abs(x))"], None, "torch.abs(x)"),
    31: (
        "elu",
        [
            "em1 = tl.where(tl.abs(x) < 1e-2,",
            "               x + x * x * (0.5 + x * (1.0 / 6.0 + x * (1.0 / 24.0))),",
            "               tl.exp(x) - 1.0)",
            "y = tl.where(x > 0.0, x, alpha * em1)",
        ],
        ("alpha", "1.0"),
        "F.elu",
    ),
    32: (
        "hardtanh",
        ["y = tl.where(x < -1.0, -1.0, tl.where(x > 1.0, 1.0, x))"],
        None,
        "hardtanh",
    ),
}


def triton_source(pid):
    """The Triton `ModelNew` for level-1 problem `pid` (a key of TRITON_KERNELS)."""
    name, body, param, _ = TRITON_KERNELS[pid]
    if param:
        pname, default = param
        params, args = f", {pname}", f", self.{pname}"
        init_sig = f", {pname}: float = {default}"
        init_body = f"        self.{pname} = float({pname})\n"
    else:
        params = args = init_sig = ""
        init_body = ""
    return _TRITON_TEMPLATE.format(
        name=name,
        params=params,
        body="\n".join("    " + line for line in body),
        init_sig=init_sig,
        init_body=init_body,
        args=args,
    )


# --- the throughput set ---------------------------------------------------------------------


def throughput_set(kernelbench, n, nonce, triton=True, only=None):
    """`n` distinct level-1 candidates: the Triton ones whose problem is in the checkout (at
    most half of `n`), then PyTorch ones spread evenly over the level's problems (`only`: a
    set of ids to take them from), cycling with a new variant once every problem has one.
    Each is a dict: index, kind, level, id, name, label, source."""
    files = problem_files(level_dir(kernelbench, 1))
    if only is not None:
        files = [f for f in files if f[0] in only]
    by_id = {pid: (name, path) for pid, name, path in files}
    out = []
    if triton:
        tri = [pid for pid in sorted(TRITON_KERNELS) if pid in by_id][: n // 2]
        for pid in tri:
            i = len(out)
            out.append(
                {
                    "index": i,
                    "kind": "triton",
                    "level": 1,
                    "id": pid,
                    "name": by_id[pid][0],
                    "label": f"bench-{nonce}-{i}-triton-L1-{pid}",
                    "source": header(nonce, i, "triton", 1, pid) + triton_source(pid),
                }
            )
    rest = n - len(out)
    if rest > 0 and not files:
        raise ValueError("no level-1 problem files to make PyTorch candidates from")
    picks = []
    if rest <= len(files):
        # Evenly spread: the i-th of `rest` takes the problem at i·P/rest.
        picks = [files[(i * len(files)) // rest] for i in range(rest)]
    else:
        picks = [files[i % len(files)] for i in range(rest)]
    sources = {}
    for pid, name, path in picks:
        if pid not in sources:
            sources[pid] = rename_model(path.read_text())
        i = len(out)
        out.append(
            {
                "index": i,
                "kind": "pytorch",
                "level": 1,
                "id": pid,
                "name": name,
                "label": f"bench-{nonce}-{i}-pytorch-L1-{pid}",
                "source": header(nonce, i, "pytorch", 1, pid) + sources[pid],
            }
        )
    return out


# --- published sets -------------------------------------------------------------------------

_REPLAY = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")
_LEVEL_PROBLEM = re.compile(r"^(\d+)_(\d+)_.*\.py$")
_LB_KEY = re.compile(r"^\s*Level\s*(\d+)\s*:\s*(\d+)_")


def _assets(folder):
    for d in (folder / "docs" / "assets", folder):
        if (d / "data.json").is_file():
            return d
    return None


def published_set(folder):
    """Kernels of a published set: (entries, notes). Entries are dicts level, id, label,
    source, claimed_speedup (or None). Layouts, the first that matches:

    - KernelBenchLeaderboard's site (FOLDER or FOLDER/docs/assets holds data.json:
      `"Level L: ID_Name"` → [{display_name, torch_speedup, file}], kernel at
      solutions/<file>.py);
    - `kbench import`'s and KernelBench's runs: `level_<L>_problem_<P>_sample_<S>_kernel.py`;
    - `level<L>/<P>_<anything>.py`;
    - `<L>_<P>_<anything>.py`.
    """
    folder = Path(folder)
    entries, notes = [], []
    assets = _assets(folder)
    if assets is not None:
        data = json.loads((assets / "data.json").read_text())
        for key, items in data.items():
            m = _LB_KEY.match(key)
            if not m or not isinstance(items, list):
                notes.append(f"data.json key {key!r}: not a 'Level L: ID_Name' list, skipped")
                continue
            level, pid = int(m.group(1)), int(m.group(2))
            for i, item in enumerate(items):
                f = item.get("file") if isinstance(item, dict) else None
                if not isinstance(f, str) or not f.strip() or "/" in f or f.startswith("."):
                    notes.append(f"{key} [{i}]: no usable file, skipped")
                    continue
                path = assets / "solutions" / f"{f.strip()}.py"
                if not path.is_file():
                    notes.append(f"{key} [{i}]: solutions/{f.strip()}.py is not in the set")
                    continue
                claim = item.get("torch_speedup")
                entries.append(
                    {
                        "level": level,
                        "id": pid,
                        "label": str(item.get("display_name") or f.strip())[:100],
                        "file": str(path.relative_to(folder)),
                        "source": path.read_text(errors="replace"),
                        "claimed_speedup": claim if isinstance(claim, (int, float)) else None,
                    }
                )
        return entries, notes
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder)
        m = _REPLAY.match(path.name)
        if m:
            level, pid = int(m.group(1)), int(m.group(2))
        elif len(rel.parts) >= 2 and re.fullmatch(r"level(\d+)", rel.parts[-2]) and PROBLEM_FILE.match(path.name):
            level = int(rel.parts[-2][5:])
            pid = int(PROBLEM_FILE.match(path.name).group(1))
        elif len(rel.parts) == 1 and _LEVEL_PROBLEM.match(path.name):
            m = _LEVEL_PROBLEM.match(path.name)
            level, pid = int(m.group(1)), int(m.group(2))
        else:
            continue
        if "problems" in rel.parts[:-1] or "refs" in rel.parts[:-1]:
            continue  # an import's references, not kernels
        entries.append(
            {
                "level": level,
                "id": pid,
                "label": path.stem[:100],
                "file": str(rel),
                "source": path.read_text(errors="replace"),
                "claimed_speedup": None,
            }
        )
    if not entries:
        notes.append(f"{folder}: no kernel file in a known layout")
    return entries, notes
