#!/usr/bin/env python3
"""nvcc on published CUDA kernel sources with torch's `torch/extension.h` and with kbench's
light one (`KBENCH_CUDA_HEADER=light`: `torch/types.h`), side by side: seconds per compile,
and which sources the light header does not serve (kbench compiles those again against
torch's own). No GPU is needed: nvcc's front ends and the host compiler run on the CPU.

    python3 cuda_header_probe.py --sources DIR --out OUT [--nvcc PATH] [-n 12] [--jobs 2]
                                 [--skip K] [--light-only]

DIR holds candidate files (`.py`, as `kbench import` writes them, or a published set's own).
No candidate code runs: each file is parsed (`ast`) and its longest string constant holding
`__global__` is taken as its CUDA source, with what `load_inline` puts first
(`torch/types.h`, `cuda.h`, `cuda_runtime.h`); files without one are skipped. The flags are
torch's for a CUDA source of an extension (`COMMON_NVCC_FLAGS`, its include folders,
`-std=c++17`, `-Xcompiler -fPIC`, one `--gpu-architecture`) plus `-O3`, which most of these
sets pass; a candidate's own `extra_cuda_cflags` are not read. Each source is compiled both
ways in one job (full first, then light), `--jobs` jobs at once, so both see the same load.
`--light-only` compiles the light way alone, and the full way only where the light one fails:
how many sources the light header serves, at half the cost. `--skip K` starts after the first
K sources (by file name), to add sources to an earlier probe.

Writes OUT/results.json (one entry per source) and OUT/summary.md.
"""

import argparse
import ast
import concurrent.futures as cf
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
LIGHT_HEADER = "#pragma once\n#include <torch/types.h>\n"


def cuda_source(path):
    """The file's longest string constant with `__global__`, or None."""
    try:
        tree = ast.parse(open(path, encoding="utf-8", errors="replace").read())
    except SyntaxError:
        return None
    best = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            if best is None or len(node.value) > len(best):
                best = node.value
    return best


def flags(arch):
    from torch.utils import cpp_extension as ext

    out = ["-DTORCH_EXTENSION_NAME=probe", "-DTORCH_API_INCLUDE_EXTENSION_H"]
    for inc in ext.include_paths(device_type="cuda"):
        out += ["-isystem", inc]
    import sysconfig

    out += ["-isystem", sysconfig.get_paths()["include"]]
    out += list(ext.COMMON_NVCC_FLAGS)
    out += ["-std=c++17", "-Xcompiler", "-fPIC", f"--gpu-architecture={arch}", "-O3"]
    return out


def compile_once(nvcc, src, obj, base_flags, light_dir):
    cmd = [nvcc, "-c", src, "-o", obj] + base_flags + (["-I", light_dir] if light_dir else [])
    t = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return time.monotonic() - t, p.returncode, (p.stdout + p.stderr)[-600:]


def job(nvcc, work, name, source, base_flags, light_dir, light_only):
    src = os.path.join(work, name + ".cu")
    with open(src, "w") as f:
        f.write(PRELUDE + source)
    full_s = full_rc = full_err = None
    if not light_only:
        full_s, full_rc, full_err = compile_once(nvcc, src, src + ".full.o", base_flags, None)
    light_s, light_rc, light_err = compile_once(nvcc, src, src + ".light.o", base_flags, light_dir)
    if light_only and light_rc:
        full_s, full_rc, full_err = compile_once(nvcc, src, src + ".full.o", base_flags, None)
    return {
        "source": name,
        "full_s": None if full_s is None else round(full_s, 2),
        "full_rc": full_rc,
        "light_s": round(light_s, 2),
        "light_rc": light_rc,
        "full_error": full_err if full_rc else "",
        "light_only": light_only,
        "light_error": light_err if light_rc else "",
    }


def summarize(results, meta):
    both = [r for r in results if r["full_rc"] == 0 and r["light_rc"] == 0]
    light_only = [r for r in results if r["full_rc"] is None]
    lines = [
        "# nvcc with torch/extension.h and with the light header (torch/types.h)",
        "",
        f"nvcc: {meta['nvcc_version']}; host compiler: {meta['host_compiler']}; torch {meta['torch']}; "
        f"{meta['cores']} cores, {meta['jobs']} jobs at once; sources: {meta['sources']}.",
        "",
        f"- sources compiled: {len(results)}; both ways: {len(both)}; the light way alone (it built): {len(light_only)}",
        f"- the light header does not serve (full builds, light fails): "
        f"{sum(1 for r in results if r['full_rc'] == 0 and r['light_rc'] != 0)}",
        "- light builds, full fails: "
        + (
            f"{sum(1 for r in results if r['full_rc'] not in (0, None) and r['light_rc'] == 0)}"
            + (f" (not checked for {len(light_only)} compiled the light way alone)" if light_only else "")
        ),
        f"- fail both ways: {sum(1 for r in results if r['full_rc'] != 0 and r['light_rc'] != 0)}",
    ]
    if light_only:
        light = [r["light_s"] for r in light_only]
        lines += ["", f"The light way alone: median {statistics.median(light):.1f} s, sum {sum(light):.0f} s."]
    if both:
        full = [r["full_s"] for r in both]
        light = [r["light_s"] for r in both]
        # Times are kept to 10 ms: a compile quicker than that (a stand-in nvcc) has no ratio.
        ratios = [r["light_s"] / r["full_s"] for r in both if r["full_s"] > 0]
        median_ratio = f"{statistics.median(ratios):.2f}" if ratios else "—"
        sum_ratio = f"{sum(light) / sum(full):.2f}" if sum(full) > 0 else "—"
        lines += [
            "",
            "| | full | light | light / full |",
            "|---|---:|---:|---:|",
            f"| median s | {statistics.median(full):.1f} | {statistics.median(light):.1f} | {median_ratio} |",
            f"| sum s | {sum(full):.0f} | {sum(light):.0f} | {sum_ratio} |",
        ]
    return "\n".join(lines) + "\n"


def self_test():
    """summarize() on rows made by hand: ratios where the full way took time, none where it
    rounded to 0 s (a stand-in nvcc), and the counts."""
    meta = {"nvcc_version": "v", "host_compiler": "h", "torch": "t", "cores": 2, "jobs": 2, "sources": "s"}
    row = lambda n, f, l, frc=0, lrc=0: {"source": n, "full_s": f, "full_rc": frc, "light_s": l, "light_rc": lrc}
    got = summarize([row("a", 2.0, 1.0), row("b", 4.0, 1.0), row("c", 1.0, 1.0, lrc=2)], meta)
    assert "| median s | 3.0 | 1.0 | 0.38 |" in got, got
    assert "| sum s | 6 | 2 | 0.33 |" in got, got
    assert "the light header does not serve (full builds, light fails): 1" in got, got
    got = summarize([row("a", 0.0, 0.0), row("b", 0.0, 0.0, lrc=2)], meta)
    assert "| median s | 0.0 | 0.0 | — |" in got and "| sum s | 0 | 0 | — |" in got, got
    got = summarize([row("a", 0.0, 0.01), row("b", 0.02, 0.01)], meta)
    assert "| median s | 0.0 | 0.0 | 0.50 |" in got and "| sum s | 0 | 0 | 1.00 |" in got, got
    print("self-test: ok")


def tool_version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()
        return out[-1] if out else "?"
    except OSError:
        return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("-n", type=int, default=12, help="sources to compile (the first N by name)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--skip", type=int, default=0, help="start after the first K sources")
    ap.add_argument("--light-only", action="store_true", help="the full way only where the light one fails")
    a = ap.parse_args()
    files = sorted(f for f in os.listdir(a.sources) if f.endswith(".py"))
    picked = []
    seen = 0
    for f in files:
        s = cuda_source(os.path.join(a.sources, f))
        if s:
            seen += 1
            if seen > a.skip:
                picked.append((f[:-3], s))
        if len(picked) == a.n:
            break
    if not picked:
        sys.exit(f"no CUDA source (a string with __global__) in the .py files of {a.sources}")
    os.makedirs(a.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cuda-header-probe-")
    light_dir = os.path.join(work, "light")
    os.makedirs(os.path.join(light_dir, "torch"))
    with open(os.path.join(light_dir, "torch", "extension.h"), "w") as f:
        f.write(LIGHT_HEADER)
    import torch

    base = flags(a.arch)
    meta = {
        "nvcc_version": tool_version([a.nvcc, "--version"]),
        "host_compiler": tool_version(["sh", "-c", "c++ --version | head -1"]),
        "torch": torch.__version__,
        "cores": os.cpu_count(),
        "jobs": a.jobs,
        "skip": a.skip,
        "light_only": a.light_only,
        "sources": a.sources,
        "flags": base,
    }
    with cf.ThreadPoolExecutor(a.jobs) as pool:
        futures = [pool.submit(job, a.nvcc, work, n, s, base, light_dir, a.light_only) for n, s in picked]
        results = []
        for fu in cf.as_completed(futures):
            r = fu.result()
            results.append(r)
            full = "-" if r["full_s"] is None else f"{r['full_s']:.1f} s (rc {r['full_rc']})"
            print(f"{r['source']}: full {full}, light {r['light_s']:.1f} s (rc {r['light_rc']})", flush=True)
    results.sort(key=lambda r: r["source"])
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1)
    summary = summarize(results, meta)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(summary)
    print(summary)


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        main()
