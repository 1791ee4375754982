"""Summarises bench/build_ahead/run.sh's output folder: per run, seconds per kernel, the first
verdict, the GPU's and the host CPU's busy shares after it, builds at once, peak host memory,
a build job's CPU seconds by compiler stage (host_cpu.py's file), and where each
kernel's build went (ahead, or in its own worker), and loads that compiled again after a build
(with ninja's reasons, from the workers' logs in `logs.tgz`); for runs side by side (`<step>_cold` and
`<step>_cold_nopch`, `<step>_cold_light` or `<step>_cold_cxx`), their ratio and every kernel whose verdict
differs. Python 3 standard library only.

    python3 bench/build_ahead/summarize.py OUT > OUT/summary.md
"""

import json
import os
import re
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbench_records import read_jsonl  # noqa: E402 (the shared reader, one folder up)


def most_at_once(intervals):
    """The largest number of [start, end] intervals that overlap."""
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = best = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


def builds_done(builds):
    """How many builds' worth of work the run's build jobs did: each complete job counts one,
    each other job (cut by the run's end, or failed) the share of a complete job's median
    seconds it ran, at most one. A cut run starts jobs until its last moment, and counting
    those as whole builds made its CPU seconds a build look smaller than they were. A job's
    seconds are its journal line's end less its start, as for `most_at_once`."""
    def seconds(b):
        return b["ended_unix_s"] - b["started_unix_s"]

    whole = sorted(seconds(b) for b in builds if b.get("complete"))
    if not whole:
        return float(len(builds))
    median = whole[len(whole) // 2]
    part = sum(min(1.0, seconds(b) / median) for b in builds if not b.get("complete"))
    return len(whole) + part


def build_waits(records):
    """Seconds the device waited for builds: inside the records (their `compile_s`, a wait
    for the kernel's own build and its load, which with a build done ahead is tenths of a
    second), and before them (`build_wait_s`, the executor waiting for whichever kernel taken
    ahead was built first; records before it have none)."""
    def total(key):
        return sum(float((r.get("phases") or {}).get(key) or 0.0) for r in records)
    return total("compile_s"), total("build_wait_s")


def host_cpu(path, t0, t1):
    """From host_cpu.py's file: the host's CPU busy share between t0 and t1 (None without two
    samples there), the CPU seconds by stage over the whole run, and the host's busy CPU seconds
    they are a part of; (None, {}, None) where the file cannot be read."""
    try:
        with open(path) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return None, {}, None
    inside = [x for x in got.get("stat", []) if t0 is not None and t0 <= x[0] <= t1]
    # The counters only grow: the window's jiffies are its last sample's less its first's.
    total = inside[-1][1] - inside[0][1] if len(inside) > 1 else 0
    idle = inside[-1][2] - inside[0][2] if len(inside) > 1 else 0
    share = 1 - idle / total if total > 0 else None
    return share, got.get("stages", {}), got.get("host_busy_cpu_s")


def busy_share(samples, t0, t1):
    """Share of the samples in [t0, t1] in which the GPU was busy (NVML utilization > 0), and
    the mean utilization; None without samples."""
    u = [s.get("util_pct") for s in samples if t0 <= s.get("t_unix_s", 0) <= t1 and s.get("util_pct") is not None]
    if not u:
        return None, None
    return sum(1 for x in u if x > 0) / len(u), sum(u) / len(u) / 100


def busy_by_window(samples, t0, t1, width=60.0):
    """The GPU's busy share ([`busy_share`]) in each `width`-second window from t0 to t1, the
    last window shorter: where in a run the GPU idled, since a run's busy share after its first
    verdict depends on where it was cut (a stretch of short evaluations near the end weighs on
    it alone). None for a window without samples."""
    out, a = [], t0
    while a < t1:
        b = a + width
        # Half-open windows, the last closed at t1: a sample on a boundary counts once.
        last = b >= t1
        inside = [x for x in samples if a <= x.get("t_unix_s", 0) < b or (last and x.get("t_unix_s", 0) == t1)]
        out.append(busy_share(inside, a, t1)[0])
        a = b
    return out


# What an evaluating worker writes before a ninja run in a folder that already holds a build
# (kbench_worker/rebuild_reasons.py): this line, then one indented line of ninja's an output.
AGAIN = "kbench: ninja compiles again in "


def _reason(line, folder):
    """One of ninja's reasons, its build folder and its modification times left out, so that
    the same reason in many folders counts as one."""
    line = line.strip().replace(folder.rstrip("/") + "/", "")
    return re.sub(r" \(\d+ vs \d+\)$", "", line)


def recompiles(logs_tgz):
    """(loads that compiled again in a folder holding a build, {reason: count}) from a run's
    logs.tgz; (None, {}) where it cannot be read."""
    loads, reasons = 0, {}
    try:
        with tarfile.open(logs_tgz) as tar:
            for member in tar:
                f = tar.extractfile(member) if member.isfile() else None
                if f is None:
                    continue
                folder = None
                for line in f.read().decode(errors="replace").splitlines():
                    if line.startswith(AGAIN):
                        loads += 1
                        # The folder as the worker wrote it (a comma in it stays).
                        folder = line[len(AGAIN):].rsplit(", which holds a build", 1)[0]
                    elif folder is not None and line.startswith("  "):
                        r = _reason(line, folder)
                        reasons[r] = reasons.get(r, 0) + 1
                    else:
                        folder = None
    except (OSError, tarfile.TarError):
        return None, {}
    return loads, reasons


def summarize(out, name):
    try:
        with open(os.path.join(out, f"{name}.wall")) as f:
            t0, t1, rc = f.read().split()
        t0, t1 = float(t0), float(t1)
    except (OSError, ValueError):
        return None
    records = read_jsonl(os.path.join(out, name, "records.jsonl"))
    builds = read_jsonl(os.path.join(out, name, "builds.jsonl"))
    # Builds' worth of work, over which the run's CPU seconds are shared.
    done = builds_done(builds) if builds else 0.0
    samples = read_jsonl(os.path.join(out, name, "gpu_samples.jsonl"))
    mem = []
    try:
        with open(os.path.join(out, f"{name}.mem")) as f:
            mem = [int(line.split()[1]) for line in f if len(line.split()) == 2]
    except OSError:
        pass
    kernels = [r for r in records if r.get("outcome", {}).get("kind") not in (None, "no_kernel")]
    finished = sorted(r.get("finished_unix_s", t1) for r in kernels)
    first = finished[0] - t0 if finished else None
    share, util = busy_share(samples, finished[0], finished[-1]) if finished else (None, None)
    kinds = {}
    for r in kernels:
        k = r["outcome"]["kind"]
        kinds[k] = kinds.get(k, 0) + 1
    slow_loads = sorted(
        ((r.get("load_s") or 0.0, (r.get("candidate") or {}).get("name", "?")) for r in kernels), reverse=True
    )[:5]
    setup_s = None
    try:
        with open(os.path.join(out, f"{name}.setup")) as f:
            said = f.read().split()
        setup_s = float(said[said.index("seconds") + 1])
    except (OSError, ValueError, IndexError):
        pass
    again, reasons = recompiles(os.path.join(out, name, "logs.tgz"))
    cpu_share, stages, host_busy_s = host_cpu(os.path.join(out, f"{name}.cpu.json"),
                                    finished[0] if finished else None, finished[-1] if finished else None)
    waits_inside, waits_before = build_waits(kernels)
    return {
        "run": name,
        # The device's waits for builds, inside records and before them (build_waits).
        "build_wait_inside_records_s": waits_inside,
        "build_wait_before_records_s": waits_before,
        # Loads whose ninja had work in a folder that held a build, and ninja's reasons.
        "loads_compiled_again": again,
        "compile_again_reasons": sorted(reasons.items(), key=lambda kv: -kv[1])[:3],
        # `kbench setup` making the precompiled headers before the run (SETUP_PCH=1).
        "pch_setup_s": setup_s,
        "rc": int(rc),
        "kernels": len(kernels),
        "wall_s": t1 - t0,
        "s_per_kernel": (t1 - t0) / len(kernels) if kernels else None,
        # Stopped by run.sh's LIMIT (`timeout`): its wall time is the limit, so seconds per
        # kernel over it is no rate; the pace between the first and the last verdict is.
        "cut": int(rc) in (124, 137),
        "s_per_kernel_after_first": (finished[-1] - finished[0]) / (len(finished) - 1) if len(finished) > 1 else None,
        "first_verdict_s": first,
        "gpu_busy_share_after_first": share,
        "gpu_mean_util_after_first": util,
        "gpu_busy_by_minute_after_first": busy_by_window(samples, finished[0], finished[-1]) if finished else [],
        # The host's CPU (all cores) busy between the first and the last verdict: near 100%
        # with the GPU idle means the host's work (builds) binds, not the scheduling.
        "host_cpu_busy_after_first": cpu_share,
        # CPU seconds of the whole run by stage (host_cpu.py), and over its build jobs.
        "cpu_s_by_stage": stages,
        # Kernel threads and other tenants ("other") left out.
        "cpu_s_a_build": sum(v for k, v in stages.items() if k != "other") / done if stages and builds else None,
        "builds_done": done,
        "host_busy_cpu_s": host_busy_s,
        "builds_ahead": len(builds),
        "builds_at_once": most_at_once([(b["started_unix_s"], b["ended_unix_s"]) for b in builds]) if builds else 0,
        "builds_complete": sum(1 for b in builds if b.get("complete")),
        "peak_host_mem_gib": (max(mem) - mem[0]) / 2**30 if mem else None,
        "outcomes": kinds,
        # Each kernel's verdict, to compare runs side by side: (problem, candidate) -> kind.
        "verdicts": {verdict_key(r): r["outcome"]["kind"] for r in kernels},
        "slowest_loads": [(round(s, 1), k) for s, k in slow_loads],
    }


def verdict_key(r):
    p, c = r.get("problem") or {}, r.get("candidate") or {}
    return f"L{p.get('level', '?')}/{p.get('id', p.get('name', '?'))} s{c.get('sample', '?')} {c.get('name', '?')}"


def differing(a, b):
    """Kernels both runs judged, whose verdicts differ: [(kernel, a's, b's)]."""
    va, vb = a["verdicts"], b["verdicts"]
    return sorted((k, va[k], vb[k]) for k in va.keys() & vb.keys() if va[k] != vb[k])


# Kernels each of two runs, one of them cut by its time limit, must have judged before their
# paces between the first and the last verdict are compared.
CUT_MIN_KERNELS = 5


def pace(a, b):
    """Two runs side by side: their seconds a kernel and the ratio. Over the whole run when
    neither was cut by its time limit; else between the first and the last verdict, when
    both judged CUT_MIN_KERNELS or more; else not compared, saying why."""
    if not (a["cut"] or b["cut"]):
        if a["s_per_kernel"] and b["s_per_kernel"]:
            return (f"{a['s_per_kernel']:.2f} against {b['s_per_kernel']:.2f} s a kernel "
                    f"({a['s_per_kernel'] / b['s_per_kernel']:.2f}x the time)")
        return "not compared: a run judged no kernel"
    few = [s for s in (a, b) if s["kernels"] < CUT_MIN_KERNELS or not s["s_per_kernel_after_first"]]
    if few:
        return "not compared: " + "; ".join(
            f"{s['run']} was cut by its time limit after {s['kernels']} kernel(s)" if s["cut"]
            else f"{s['run']} judged {s['kernels']} kernel(s)" for s in few)
    x, y = a["s_per_kernel_after_first"], b["s_per_kernel_after_first"]
    return (f"{x:.2f} against {y:.2f} s a kernel between the first and the last verdict "
            f"({x / y:.2f}x the time; {', '.join(s['run'] for s in (a, b) if s['cut'])} cut by its time limit)")


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main():
    out = sys.argv[1]
    runs = []
    for name in (f"{step}_{run}" for step in ("fixtures", "lb", "cpu") for run in ("cold_cxx", "cold", "cold_nopch", "cold_light", "warm")):
        s = summarize(out, name)
        if s is not None:
            runs.append(s)
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(runs, f, indent=1)
    print("| run | rc | kernels | wall s | s/kernel | first verdict s | s/kernel after it | GPU busy after first | "
          "mean util | host CPU busy after first | builds ahead (complete) | at once | peak host mem GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in runs:
        # A cut run's seconds a kernel over its whole window is an upper bound: builds of
        # kernels it did not reach ran within it.
        per = fmt(s["s_per_kernel"], ".2f") + (" (cut)" if s["cut"] else "")
        print(f"| {s['run']} | {s['rc']} | {s['kernels']} | {s['wall_s']:.0f} | {per} | "
              f"{fmt(s['first_verdict_s'], '.0f')} | {fmt(s['s_per_kernel_after_first'], '.2f')} | "
              f"{fmt(s['gpu_busy_share_after_first'], '.0%')} | "
              f"{fmt(s['gpu_mean_util_after_first'], '.0%')} | {fmt(s['host_cpu_busy_after_first'], '.0%')} | "
              f"{s['builds_ahead']} ({s['builds_complete']}) | "
              f"{s['builds_at_once']} | {fmt(s['peak_host_mem_gib'], '.1f')} |")
    for s in runs:
        setup = f"; headers made by setup first in {s['pch_setup_s']:.0f} s" if s["pch_setup_s"] is not None else ""
        again = ""
        if s["loads_compiled_again"]:
            again = f"; loads that compiled again after a build: {s['loads_compiled_again']}, ninja said {s['compile_again_reasons']}"
        print(f"\n{s['run']}: outcomes {s['outcomes']}; slowest loads {s['slowest_loads']}{setup}{again}")
        print(f"{s['run']}: the device waited for builds {s['build_wait_inside_records_s']:.0f} s inside the "
              f"records (compile_s, their loads included) and {s['build_wait_before_records_s']:.0f} s before them "
              "(build_wait_s: for whichever kernel taken ahead was built first)")
        if s["gpu_busy_by_minute_after_first"]:
            print(f"{s['run']}: GPU busy each minute after the first verdict: "
                  + " ".join(fmt(x, ".0%") for x in s["gpu_busy_by_minute_after_first"]))
        if s["cpu_s_a_build"] is not None:
            n = s["builds_done"]
            # The stages the figure sums (`other` left out, as in it), largest first.
            parts = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(s["cpu_s_by_stage"].items(), key=lambda kv: -kv[1])
                              if k != "other" and v / n >= 0.05)
            counted = sum(s["cpu_s_by_stage"].values())
            of = (f"; {counted:.0f} of the host's {s['host_busy_cpu_s']:.0f} busy CPU seconds counted (processes"
                  " shorter than a sample, and the last moments of each, are not)") if s["host_busy_cpu_s"] else ""
            print(f"{s['run']}: CPU seconds a build (the run's, over the {n:.1f} builds' worth its {s['builds_ahead']} build "
                  f"jobs did, those cut or failed counted by the share of a build they ran; workers' and kbench's "
                  f"own included, `other` left out): {s['cpu_s_a_build']:.1f}: {parts}{of}")
    by_name = {s["run"]: s for s in runs}
    # (the first run, the second, what the pair compares): the setting's run first.
    beside = (("cold", "cold_nopch", "precompiled headers against none"),
              ("cold_light", "cold", "the light CUDA header against torch's"),
              ("cold_cxx", "cold", "the light C++ header against torch's"))
    for step in ("fixtures", "lb", "cpu"):
        for first, second, what in beside:
            a, b = by_name.get(f"{step}_{first}"), by_name.get(f"{step}_{second}")
            if not (a and b):
                continue
            print(f"\n{step} cold, {what}: {pace(a, b)}")
            diff = differing(a, b)
            common = len(a["verdicts"].keys() & b["verdicts"].keys())
            print(f"{step} cold, verdicts of the {common} kernels both runs judged: "
                  + ("all the same" if not diff else f"{len(diff)} differ"))
            for k, va, vb in diff:
                print(f"- {k}: {va} against {vb}")


def self_test():
    """recompiles() on a logs.tgz of two workers' logs: three loads, reasons counted across
    folders; host_cpu() on a sampler's file."""
    with tempfile.TemporaryDirectory() as d:
        logs = os.path.join(d, "logs")
        os.makedirs(logs)
        for i in (1, 2):
            b = f"/cache/torch_extensions/{i}/matmul_cuda"
            with open(os.path.join(logs, f"w{i}.log"), "w") as f:
                f.write(f"starting\n{AGAIN}{b}, which holds a build:\n"
                        f"  command line changed for main.o\n"
                        f"  output cuda.cuda.o older than most recent input {b}/cuda.cu ({i}5 vs {i}6)\n"
                        f"loaded\n")
                if i == 2:
                    f.write(f"{AGAIN}{b}, which holds a build:\n  command line changed for main.o\n")
        with tarfile.open(os.path.join(d, "logs.tgz"), "w:gz") as tar:
            tar.add(logs, arcname="logs")
        loads, reasons = recompiles(os.path.join(d, "logs.tgz"))
        assert loads == 3, loads
        assert reasons == {"command line changed for main.o": 3,
                           "output cuda.cuda.o older than most recent input cuda.cu": 2}, reasons
        assert recompiles(os.path.join(d, "missing.tgz")) == (None, {})
        # host_cpu(): the busy share over the samples inside the window only (the first
        # interval 50% busy, the second 100%; the one after the window left out).
        cpu = os.path.join(d, "run.cpu.json")
        with open(cpu, "w") as f:
            json.dump({"stat": [[10.0, 100, 50], [11.0, 200, 100], [12.0, 300, 100], [13.0, 400, 200]],
                       "stages": {"nvcc: cicc (device code)": 8.0}, "host_busy_cpu_s": 9.5}, f)
        share, stages, busy_s = host_cpu(cpu, 10.0, 12.5)
        assert abs(share - 0.75) < 1e-9 and stages == {"nvcc: cicc (device code)": 8.0} and busy_s == 9.5, \
            (share, stages, busy_s)
        assert host_cpu(cpu, 20.0, 30.0)[0] is None
        assert host_cpu(os.path.join(d, "missing.json"), 0, 1) == (None, {}, None)
        # busy_by_window(): busy in the first minute, idle in the second, a short third
        # window half busy, and a window without samples.
        samples = ([{"t_unix_s": 100.0 + t, "util_pct": 50} for t in range(0, 60, 10)]
                   + [{"t_unix_s": 160.0 + t, "util_pct": 0} for t in range(0, 60, 10)]
                   + [{"t_unix_s": 220.0, "util_pct": 7}, {"t_unix_s": 225.0, "util_pct": 0}])
        assert busy_by_window(samples, 100.0, 225.0) == [1.0, 0.0, 0.5], busy_by_window(samples, 100.0, 225.0)
        assert busy_by_window(samples, 300.0, 370.0) == [None, None]
        assert busy_by_window(samples, 100.0, 100.0) == []
        # builds_done(): three complete jobs (median 40 s), one cut after 10 s (a quarter), one
        # started at the cut (nothing), one failed after 60 s (at most one build).
        def ran(s, complete):
            return {"complete": complete, "started_unix_s": 100.0, "ended_unix_s": 100.0 + s}
        jobs = ([ran(x, True) for x in (30.0, 40.0, 50.0)]
                + [ran(10.0, False), ran(0.0, False), ran(60.0, False)])
        assert abs(builds_done(jobs) - 4.25) < 1e-9, builds_done(jobs)
        assert builds_done([ran(5.0, False)]) == 1.0
        assert builds_done([ran(4.0, True), ran(2.0, False)]) == 1.5
        # build_waits(): compile_s and build_wait_s summed; records without them count 0.
        recs = [{"phases": {"compile_s": 2.5, "build_wait_s": 1.0}}, {"phases": {"compile_s": 0.5}},
                {"phases": None}, {}]
        assert build_waits(recs) == (3.0, 1.0), build_waits(recs)
    print("self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    else:
        main()
