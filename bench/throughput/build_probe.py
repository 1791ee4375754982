"""Cold load_inline build times of one trivial CUDA extension, with and without torch's
precompiled header for torch/extension.h (use_pch), each in a fresh build directory, with
ninja's time for each step (the binding, the kernel source, the link).

    python3 bench/throughput/build_probe.py OUT.json

Run on the GPU machine (nvcc and a CUDA build of torch needed). Prints and writes seconds.
"""

import json
import os
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


def build(tag, use_pch, cuda_src=CUDA):
    d = tempfile.mkdtemp(prefix=f"kbench-probe-{tag}-")
    t = time.perf_counter()
    mod = load_inline(name=f"probe_{tag}", cpp_sources=CPP, cuda_sources=cuda_src,
                      functions=["add_one"], build_directory=d, use_pch=use_pch,
                      extra_cuda_cflags=["-O3"], verbose=False)
    dt = time.perf_counter() - t
    x = torch.arange(10, dtype=torch.float32, device="cuda")
    assert torch.equal(mod.add_one(x), x + 1)
    return {"total_s": dt, "steps_s": ninja_steps(d)}


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


def main():
    out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
           "arch_list": os.environ.get("TORCH_CUDA_ARCH_LIST"), "max_jobs": os.environ.get("MAX_JOBS")}
    out["default_s"] = build("default", False)
    out["pch_first_s"] = build("pch1", True)  # builds extension.h.gch as well
    out["pch_warm_s"] = build("pch2", True)  # PCH already there: the steady state
    out["default_again_s"] = build("default2", False)
    print(json.dumps(out, indent=1))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
