"""One max-autotune compile of a KernelBench problem's Model in plain Python, outside kbench:
the anchor `baselines.sh autotune-probe` sets beside kbench's own measurement of the same problem,
to tell torch's compile time from anything kbench's worker adds to it.

    python3 tests/gpu/autotune_plain.py path/to/level3/4_LeNet5.py [mode [device]]

With PROBE_CUPTI=1 it first starts and stops a CUDA-only Kineto profiler around one small
kernel, as kbench's GPU workers do when they start (`integrity._warm_cuda`), so that a compile
slowed by CUPTI having been initialised shows as the difference from the plain one.

With PROBE_MALLOPT=1 it also sets glibc's heap thresholds as kbench's workers do at start
(`cpu_heap.reuse_freed_blocks`: mmap threshold 32 MiB, trim threshold 1 GiB).

With PROBE_NO_POOL=1 inductor's compile_threads is 1, so it starts no pool of compile
processes: a template's choices are then precompiled by a thread pool (as many threads as
cores) before they are benchmarked, where with the process pool (the default once it has
started) each choice may be compiled inside its own benchmark, one after the other.

With PROBE_WARM_POOL=1 it starts inductor's pool of compile processes first and waits (up to
60 s) until inductor would use it, as it does in a kbench worker, whose compile starts after
the reference's load: templates' choices are then compiled in the pool, not by threads.

With PROBE_HYBRID=1 (which implies PROBE_WARM_POOL=1) the pool is kept for inductor's ordinary
kernels, but while a template's choices are being submitted for precompiling inductor is told
the pool is not there, so they are precompiled by threads (as with compile_threads 1) while
everything else still compiles in the pool. A candidate for kbench's generated baselines if it
is much faster than compile_threads 1 on a large model (L3/9 ResNet18).

Prints one JSON line: the problem, the mode, the seconds of the first call (the compile,
autotuning included, as kbench's `load` counts it) and of a second call. Inductor writes its
`AUTOTUNE ... benchmarking takes` lines to stderr.
"""

import ctypes
import json
import os
import sys
import time

import torch
from problem_load import load_problem


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    path = sys.argv[1]
    mode = sys.argv[2] if len(sys.argv) > 2 else "max-autotune"
    device = torch.device(sys.argv[3] if len(sys.argv) > 3 else "cuda")
    # As a kbench worker: before any problem code.
    mallopt = os.environ.get("PROBE_MALLOPT") == "1"
    if mallopt:
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    model, inputs = load_problem(path, device)
    cupti = os.environ.get("PROBE_CUPTI") == "1" and device.type == "cuda"
    if cupti:
        # kbench_worker.integrity: cuda_profiler() and _warm_cuda(), restated so that this
        # script imports nothing of kbench's.
        x = torch.zeros(1024, device=device)
        with torch.autograd.profiler.profile(use_device="cuda", use_kineto=True, use_cpu=False):
            x.add_(1.0)
            torch.cuda.synchronize(device)
        del x
    no_pool = os.environ.get("PROBE_NO_POOL") == "1"
    if no_pool:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1
    hybrid = os.environ.get("PROBE_HYBRID") == "1"
    if hybrid:
        templates_by_threads()
    warm_pool = os.environ.get("PROBE_WARM_POOL") == "1" or hybrid
    pool_ready_s = None
    if warm_pool:
        from torch._inductor.async_compile import AsyncCompile

        t0 = time.perf_counter()
        AsyncCompile.warm_pool()
        while not AsyncCompile.use_process_pool() and time.perf_counter() - t0 < 60:
            time.sleep(0.1)
        pool_ready_s = time.perf_counter() - t0 if AsyncCompile.use_process_pool() else None
    compiled = torch.compile(model, mode=mode)
    t0 = time.perf_counter()
    compiled(*inputs)
    sync(device)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled(*inputs)
    sync(device)
    second = time.perf_counter() - t0
    print(json.dumps({"problem": path, "mode": mode, "device": str(device), "cupti_warmed": cupti, "mallopt": mallopt, "no_pool": no_pool, "warm_pool": warm_pool, "hybrid": hybrid, "pool_ready_s": pool_ready_s, "omp_threads": os.environ.get("OMP_NUM_THREADS"), "first_call_s": first, "second_call_s": second, "inductor_counters": counters()}))


def templates_by_threads():
    """PROBE_HYBRID: AsyncCompile.use_process_pool answers False inside
    AlgorithmSelectorCache.make_precompile_fn (where a template's choices are submitted), and
    as before everywhere else. torch 2.11's internals: a probe, not kbench's code."""
    import threading

    from torch._inductor import select_algorithm
    from torch._inductor.async_compile import AsyncCompile

    local = threading.local()
    use_pool = AsyncCompile.use_process_pool.__func__

    def use_process_pool(cls):
        return False if getattr(local, "templates", False) else use_pool(cls)

    make = select_algorithm.AlgorithmSelectorCache.make_precompile_fn

    def make_precompile_fn(self, *args, **kwargs):
        local.templates = True
        try:
            return make(self, *args, **kwargs)
        finally:
            local.templates = False

    AsyncCompile.use_process_pool = classmethod(use_process_pool)
    select_algorithm.AlgorithmSelectorCache.make_precompile_fn = make_precompile_fn


def counters():
    """inductor's counts of compiles in the pool and in this process (which path ran)."""
    from torch._dynamo.utils import counters as c

    return {k: v for k, v in c["inductor"].items() if "async_compile" in k or "precompil" in k}


if __name__ == "__main__":
    main()
