"""Where two GPUs of one host slow each other down (in the multi-GPU runs every problem took
8.9% longer with two at once, launch-bound timings up to 78%). Three probes, each alone and then with a
twin on the other GPU started at the same instant:

- spin: a pure-Python loop pinned to one core (which vCPUs share a physical core: the harness
  reserves the highest-numbered ones for timing);
- launch: a forward of 200 tiny CUDA kernels, synchronised, pinned to one core (what a
  launch-bound level-3 model's timing is);
- alloc: cudaMalloc/cudaFree of 64 MiB (torch.empty + empty_cache), the driver calls the
  worker traces found 1.2-1.6x slower with two GPUs busy.

    python3 bench/throughput/probe_contention.py [--gpus 0,1] [--seconds 3] > probe.json

Prints one JSON object: the host's topology (sibling lists) and, per probe and placement,
the rate alone and in pairs; then k pure-Python spinners at once on k distinct cores (k = 1,
2, 4, 8, 16, all): how much one busy vCPU slows the others on this host.
"""

import argparse
import glob
import json
import multiprocessing as mp
import os
import time

from cpu_speed import spin_once  # the same unit as run.sh's cpu_speed samples (this folder)


def topology():
    out = {}
    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list")):
        cpu = int(path.split("/")[5][3:])
        with open(path) as f:
            out[cpu] = f.read().strip()
    return dict(sorted(out.items()))


def worker(kind, gpu, cpu, seconds, barrier, q):
    os.sched_setaffinity(0, {cpu})
    if kind != "spin":
        import torch

        dev = torch.device("cuda", gpu)
        torch.cuda.set_device(dev)
        x = torch.ones(16, device=dev)
        torch.cuda.synchronize()
    barrier.wait()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        if kind == "spin":
            spin_once()
        elif kind == "launch":
            y = x
            for _ in range(200):
                y = y + 1
            torch.cuda.synchronize()
        else:
            b = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
            del b
            torch.cuda.empty_cache()
        n += 1
    q.put(n / (time.perf_counter() - t0))


def run(kind, placements, seconds):
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    barrier = ctx.Barrier(len(placements))
    ps = [ctx.Process(target=worker, args=(kind, g, c, seconds, barrier, q)) for g, c in placements]
    for p in ps:
        p.start()
    rates = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return sorted(rates)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()
    g0, g1 = (int(x) for x in a.gpus.split(","))
    n = os.cpu_count()
    top, other, far = n - 1, n - 2, n // 2 - 1
    res = {"cpus": n, "siblings": topology(), "probes": []}
    for kind in ("spin", "launch", "alloc"):
        cases = [
            ("alone", [(g0, top)]),
            ("alone, other GPU", [(g1, far)]),
            (f"cores {top}+{other}", [(g0, top), (g1, other)]),
            (f"cores {top}+{far}", [(g0, top), (g1, far)]),
        ]
        if kind == "spin":
            cases.append((f"cores {top}+{n - 3}", [(g0, top), (g0, n - 3)]))
        for name, pl in cases:
            rates = run(kind, pl, a.seconds)
            res["probes"].append({"probe": kind, "placement": name, "rates_per_s": [round(r, 1) for r in rates]})
            print(json.dumps(res["probes"][-1]), flush=True)
    # How the host's vCPUs slow each other down: k spinners on k distinct cores at once.
    for k in (1, 2, 4, 8, 16, n):
        cores = [round(i * n / k) % n for i in range(k)]
        rates = run("spin", [(g0, c) for c in cores], a.seconds)
        res["probes"].append({"probe": "spin", "placement": f"{k} at once", "rates_per_s": [round(r, 1) for r in rates]})
        print(json.dumps(res["probes"][-1]), flush=True)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
