#!/usr/bin/env python3
"""Checks the replay kernels of this folder against their KernelBench problems on a GPU, outside
kbench: builds every kernel (in parallel), then compares ModelNew with Model on

  rand    the problem's own get_inputs() with its sizes cut down (odd sizes stay odd),
  signed  the same tensors mapped to [-30, 30),
  naninf  signed, with NaN, +inf and -inf sprinkled in,
  full    the problem's real sizes, for the problems named by --full (int64 indexing),

with torch.allclose(rtol=atol=1e-4, equal_nan=True) (exact for integer outputs) and, on rand, the
relative L2 error against a float64 run of Model, which must be within max(1e-4, 4 x Model's own).

    python3 tests/gpu/replay_bench_cuda/check_kernels.py [--kernelbench devrun/kernelbench] [--jobs 16]

Exit status 0 when every check passed. Run from the repository root on the GPU machine.
"""

import argparse
import concurrent.futures
import glob
import importlib.util
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_one(path):
    t = time.time()
    p = subprocess.run([sys.executable, "-c", "import runpy, sys; runpy.run_path(sys.argv[1])", path],
                       capture_output=True, text=True)
    return path, p.returncode, time.time() - t, (p.stdout + p.stderr)[-3000:]


SMALL_NAMES = ("batch_size", "dim", "dim1", "dim2", "features", "M", "N", "input_shape")


def shrink(mod):
    """Cuts the problem's module-level sizes down, keeping odd sizes odd (and a batch size that
    is also a size of input_shape equal to it)."""
    shape = getattr(mod, "input_shape", ())
    for name in SMALL_NAMES:
        v = getattr(mod, name, None)
        if isinstance(v, bool):
            continue
        if isinstance(v, int):
            cap = 16 if name == "batch_size" and v not in shape else 2048
            if v > cap:
                setattr(mod, name, cap - 1 if v % 2 else cap)
        elif isinstance(v, tuple) and all(isinstance(x, int) for x in v):
            setattr(mod, name, tuple(min(x, 2048) - (1 if x % 2 and x > 2048 else 0) for x in v))


def variant(inputs, kind, torch, gen):
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            y = (x * 2 - 1) * 30
            if kind == "naninf":
                r = torch.rand(y.shape, generator=gen, device=y.device)
                y = y.clone()
                y[r < 0.002] = float("nan")
                y[(r >= 0.002) & (r < 0.003)] = float("inf")
                y[(r >= 0.003) & (r < 0.004)] = float("-inf")
            out.append(y)
        else:
            out.append(x)
    return out


def compare(torch, got, want, want64=None, gate=False):
    """(ok, message). An element passes within tolerance of Model's output or, where given, of
    Model's float64 output (Model's own fp32 rounding on long signed sums exceeds 1e-4)."""
    if not isinstance(got, torch.Tensor):
        return False, "not a tensor: {}".format(type(got).__name__)
    if got.shape != want.shape:
        return False, "shape {} != {}".format(tuple(got.shape), tuple(want.shape))
    if got.dtype != want.dtype:
        return False, "dtype {} != {}".format(got.dtype, want.dtype)
    if not want.is_floating_point():
        bad = int((got != want).sum())
        return bad == 0, "{} of {} differ".format(bad, want.numel())
    # In chunks: full-size outputs hold up to 2.1e9 elements.
    g, w = got.reshape(-1), want.reshape(-1)
    w64 = want64.reshape(-1) if want64 is not None else None
    bad, same_nan, max_abs, step = 0, True, 0.0, 1 << 26
    for i in range(0, max(g.numel(), 1), step):
        gc, wc = g[i:i + step], w[i:i + step]
        close = torch.isclose(gc, wc, rtol=1e-4, atol=1e-4, equal_nan=True)
        if w64 is not None:
            close |= torch.isclose(gc.double(), w64[i:i + step], rtol=1e-4, atol=1e-4, equal_nan=True)
        bad += int((~close).sum())
        # isclose takes inf == inf; also insist on the same NaN positions.
        same_nan = same_nan and bool(torch.equal(torch.isnan(gc), torch.isnan(wc)))
        fin = torch.isfinite(gc) & torch.isfinite(wc)
        if bool(fin.any()):
            max_abs = max(max_abs, float((gc[fin] - wc[fin]).abs().max()))
    ok = bad == 0
    msg = "max_abs {:.3g}".format(max_abs)
    if not ok:
        msg += ", {} of {} outside tolerance".format(bad, got.numel())
    if not same_nan:
        msg += ", NaN positions differ"
    if gate and want64 is not None:
        fin64 = torch.isfinite(got) & torch.isfinite(want) & torch.isfinite(want64)
        ref = want64[fin64]
        den = float(ref.norm()) or 1.0
        e_new = float((got[fin64].double() - ref).norm()) / den
        e_ref = float((want[fin64].double() - ref).norm()) / den
        gate = max(1e-4, 4 * e_ref)
        msg += ", relL2 vs f64 {:.2e} (Model {:.2e})".format(e_new, e_ref)
        if e_new > gate:
            return False, msg + " > gate"
    return ok and same_nan, msg


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=os.path.join(HERE, "level1"))
    ap.add_argument("--kernelbench", default="devrun/kernelbench")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--only", default="", help="comma-separated problem ids")
    ap.add_argument("--full", default="19,37,38", help="problem ids also checked at their real sizes")
    a = ap.parse_args()

    os.environ.setdefault("TORCH_EXTENSIONS_DIR", "/tmp/kbench-check-kernels-ext")
    import torch

    kernels = sorted(glob.glob(os.path.join(a.kernels, "*.py")), key=lambda p: int(re.match(r"\d+", os.path.basename(p)).group()))
    if a.only:
        want = {int(x) for x in a.only.split(",")}
        kernels = [k for k in kernels if int(re.match(r"\d+", os.path.basename(k)).group()) in want]
    full = {int(x) for x in a.full.split(",") if x}
    level_dir = os.path.join(a.kernelbench, "level1")

    t0 = time.time()
    builds = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.jobs) as ex:
        for path, rc, secs, tail in ex.map(build_one, kernels):
            builds[path] = (rc, secs, tail)
    print("built {} kernels in {:.0f}s".format(len(kernels), time.time() - t0), flush=True)

    failures = 0
    gen = torch.Generator(device="cuda")
    for path in kernels:
        pid = int(re.match(r"\d+", os.path.basename(path)).group())
        rc, secs, tail = builds[path]
        head = "L1/{:<3} {:<28} build {:5.1f}s".format(pid, os.path.basename(path), secs)
        if rc != 0:
            print(head, "BUILD FAILED\n" + tail, flush=True)
            failures += 1
            continue
        problem_path = glob.glob(os.path.join(level_dir, "{}_*.py".format(pid)))
        if len(problem_path) != 1:
            print(head, "no problem file for id", pid)
            failures += 1
            continue
        try:
            kmod = load_module(path, "kernel_{}".format(pid))
            checks = []
            for size in (["small", "full"] if pid in full else ["small"]):
                pmod = load_module(problem_path[0], "problem_{}_{}".format(pid, size))
                if size == "small":
                    shrink(pmod)
                torch.manual_seed(pid)
                gen.manual_seed(pid)
                init = pmod.get_init_inputs()
                model = pmod.Model(*init).cuda()
                new = kmod.ModelNew(*init).cuda()
                with torch.device("cuda"):
                    base = pmod.get_inputs()
                base = [x.cuda() if isinstance(x, torch.Tensor) else x for x in base]
                kinds = ["rand", "signed", "naninf"] if size == "small" else ["full"]
                for kind in kinds:
                    inputs = base if kind in ("rand", "full") else variant(base, kind, torch, gen)
                    with torch.no_grad():
                        want = model(*inputs)
                        got = new(*inputs)
                        want64 = None
                        if size == "small" and want.is_floating_point():
                            in64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                                    for x in inputs]
                            want64 = model.double()(*in64)
                            model.float()
                    torch.cuda.synchronize()
                    ok, msg = compare(torch, got, want, want64, gate=kind == "rand")
                    checks.append((kind, ok, msg))
                    del want, got, want64
                del base, inputs
                torch.cuda.empty_cache()
            bad = [c for c in checks if not c[1]]
            failures += bool(bad)
            print(head, "ok" if not bad else "FAILED", "; ".join("{} {}{}".format(k, "" if ok else "FAIL ", m)
                                                                 for k, ok, m in checks), flush=True)
        except Exception as e:  # report and go on with the next kernel
            failures += 1
            print(head, "ERROR", type(e).__name__, str(e)[:2000], flush=True)
            torch.cuda.empty_cache()
    print("{} kernels, {} failed, {:.0f}s".format(len(kernels), failures, time.time() - t0))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
