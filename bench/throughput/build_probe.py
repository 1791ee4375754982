"""Cold load_inline build times of one trivial CUDA extension, with and without torch's
precompiled header for torch/extension.h (use_pch), each in a fresh build directory, with
ninja's time for each step (the binding, the kernel source, the link); then nvcc alone on
variants of that kernel source, with the build's own flags and nvcc's per-phase times
(`--time`): as load_inline compiled it, without the kernel's `torch/extension.h` (only the
`torch/types.h` load_inline puts first in every CUDA source), with no torch header at all
(a raw-pointer launcher, what the kernel itself costs), and with the host compiler's -O3
dropped. They say what stands between a cold build and 20 s.

    python3 bench/throughput/build_probe.py OUT.json
    python3 bench/throughput/build_probe.py --no-pch OUT.json   # skip the three PCH builds

Run on the GPU machine (nvcc and a CUDA build of torch needed). Prints and writes seconds.
"""

import concurrent.futures
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor add_one(torch::Tensor x);"
CUDA = r"""
#include <torch/extension.h>
__global__ void add_one_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
torch::Tensor add_one(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    add_one_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


# The same kernel with no torch header: a launcher on raw pointers (what a kernel source
# costs nvcc when the torch::Tensor wrapper lives in the C++ source instead).
RAW_CUDA = r"""
#include <cuda_runtime.h>
__global__ void add_one_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}
void add_one_launch(const float* x, float* y, long n) {
    add_one_kernel<<<(n + 255) / 256, 256>>>(x, y, n);
}
"""


def build(tag, use_pch, cuda_src=CUDA):
    d = tempfile.mkdtemp(prefix=f"kbench-probe-{tag}-")
    t = time.perf_counter()
    mod = load_inline(name=f"probe_{tag}", cpp_sources=CPP, cuda_sources=cuda_src,
                      functions=["add_one"], build_directory=d, use_pch=use_pch,
                      extra_cuda_cflags=["-O3"], verbose=False)
    dt = time.perf_counter() - t
    x = torch.arange(10, dtype=torch.float32, device="cuda")
    assert torch.equal(mod.add_one(x), x + 1)
    return {"total_s": dt, "steps_s": ninja_steps(d), "build_dir": d}


def ninja_steps(build_dir):
    """Seconds per build step from ninja's own log (v5: start ms, end ms, mtime, output,
    hash): the binding (main.o), the kernel source (cuda.cuda.o), the PCH, the link."""
    steps = {}
    try:
        with open(os.path.join(build_dir, ".ninja_log")) as f:
            for line in f:
                if line.startswith("#"):
                    continue
                parts = line.rstrip("\n").split("\t")
                if len(parts) >= 4:
                    steps[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000.0
    except OSError:
        pass
    return steps


def ninja_vars(build_dir):
    """The top-level `name = value` lines of a load_inline build.ninja (nvcc, cuda_cflags,
    cuda_post_cflags), values as ninja would pass them to the shell."""
    out = {}
    with open(os.path.join(build_dir, "build.ninja")) as f:
        for line in f:
            if line[:1].isalpha() and " = " in line and not line.startswith(("build ", "rule ")):
                k, v = line.rstrip("\n").split(" = ", 1)
                out[k.strip()] = v
    return out


def nvcc_phases(csv_path):
    """nvcc --time's table (one row per phase: source, phase name, inputs, output, arch,
    tool, metric, unit), summed by phase name, in seconds. Read by header names, so a
    column added by a later nvcc does not shift the numbers."""
    phases = {}
    try:
        with open(csv_path, newline="") as f:
            rows = list(csv.reader(f))
    except OSError:
        return phases
    if not rows:
        return phases
    head = [h.strip().lower() for h in rows[0]]
    try:
        name_at, metric_at = head.index("phase name"), head.index("metric")
    except ValueError:
        return {"unparsed": rows[:3]}
    unit_at = head.index("unit") if "unit" in head else None
    for row in rows[1:]:
        if len(row) <= max(name_at, metric_at):
            continue
        try:
            v = float(row[metric_at])
        except ValueError:
            continue
        unit = row[unit_at].strip().lower() if unit_at is not None and len(row) > unit_at else "ms"
        v = v / 1000.0 if unit == "ms" else v
        name = row[name_at].strip()
        phases[name] = round(phases.get(name, 0.0) + v, 3)
    return phases


def nvcc_variant(tag, source, variables, drop=()):
    """nvcc on `source` alone (compile only), with the build's nvcc and flags less `drop`:
    wall seconds and nvcc's per-phase seconds."""
    d = tempfile.mkdtemp(prefix=f"kbench-nvcc-{tag}-")
    cu, obj, times = (os.path.join(d, n) for n in ("k.cu", "k.o", "time.csv"))
    with open(cu, "w") as f:
        f.write(source)
    flags = [
        w for key in ("cuda_cflags", "cuda_post_cflags")
        for w in shlex.split(variables.get(key, "")) if w not in drop
    ]
    argv = shlex.split(variables.get("nvcc", "nvcc")) + ["--time", times, "-c", cu, "-o", obj] + flags
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True)
    wall = time.perf_counter() - t
    out = {"wall_s": round(wall, 2), "ok": p.returncode == 0, "phases_s": nvcc_phases(times)}
    if p.returncode != 0:
        out["error"] = (p.stderr or p.stdout)[-2000:]
    return out


def nvcc_variants(build_dir):
    """The kernel source of the default build, nvcc alone, four ways, side by side (four
    single-threaded compilers on a host of 16 cores or more)."""
    v = ninja_vars(build_dir)
    with open(os.path.join(build_dir, "cuda.cu")) as f:
        as_built = f.read()
    without_ext = as_built.replace("#include <torch/extension.h>", "")
    jobs = {
        "as_built": (as_built, ()),
        "types_h_only": (without_ext, ()),
        "no_torch_header": (RAW_CUDA, ()),
        "as_built_without_O3": (as_built, ("-O3",)),
    }
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = {k: pool.submit(nvcc_variant, k, src, v, drop) for k, (src, drop) in jobs.items()}
        out = {k: f.result() for k, f in futures.items()}
    out["flags"] = {k: v.get(k) for k in ("nvcc", "cuda_cflags", "cuda_post_cflags")}
    return out


def main():
    args = [a for a in sys.argv[1:] if a != "--no-pch"]
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"), "max_jobs": os.environ.get("MAX_JOBS"),
           "cpus": os.cpu_count()}
    out["default_s"] = build("default", False)
    if "--no-pch" not in sys.argv[1:]:
        out["pch_first_s"] = build("pch1", True)  # builds extension.h.gch as well
        out["pch_warm_s"] = build("pch2", True)  # PCH already there: the steady state
        out["default_again_s"] = build("default2", False)
    out["nvcc"] = nvcc_variants(out["default_s"]["build_dir"])
    print(json.dumps(out, indent=1))
    if args:
        with open(args[0], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
