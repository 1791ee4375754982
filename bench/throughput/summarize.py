#!/usr/bin/env python3
"""Summarize kbench throughput runs (Python 3 standard library only).

    summarize.py --out results.json --md results.md [--pair A B] [--scaling ONE TWO] RUN_DIR...
    summarize.py --self-test

Each RUN_DIR is a kbench run directory (records.jsonl, optionally gpu_samples.jsonl). A and B
of --pair, ONE and TWO of --scaling name runs by path or by the folder name of a RUN_DIR.
Records written before phases were measured (no `phases`, no `gpu`) are read all the same.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbench_records import PHASES, num, read_jsonl  # noqa: E402 (the shared reader, one folder up)

SELF_SPEEDUP_TOL = 0.01  # |speedup - 1| within 1%
PAIR_TOL = 0.02  # |a / b - 1| within 2%
# Pauses between records longer than this are taken for a run stopped and resumed later.
RESUME_GAP_S = 120.0
# The two sides of a scaling figure ran on the same machine speed if their median single-core
# speeds (run.sh's cpu_speed.py samples) are within 5%.
CPU_SPEED_TOL = 0.05
SLOWEST = 15


# ----------------------------------------------------------------------------------------------
# Reading


def get(d, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def gpu_of(rec):
    """The record's GPU ordinal: `gpu`, else the N of a `cuda:N` device, else None."""
    g = rec.get("gpu")
    if isinstance(g, int) and not isinstance(g, bool):
        return g
    dev = rec.get("device")
    if isinstance(dev, str) and dev.startswith("cuda"):
        tail = dev.partition(":")[2]
        return int(tail) if tail.isdigit() else 0
    return None


class Samples:
    """GPU utilization samples by GPU, sorted by time."""

    def __init__(self, rows):
        self.by_gpu = {}
        for r in rows:
            t, u = num(r.get("t_unix_s")), num(r.get("util_pct"))
            g = r.get("gpu")
            if t is None or u is None or not isinstance(g, int):
                continue
            self.by_gpu.setdefault(g, []).append((t, u))
        for v in self.by_gpu.values():
            v.sort()

    def __bool__(self):
        return bool(self.by_gpu)

    def busy(self, gpus, t0, t1):
        """Mean util_pct / 100 of the samples of `gpus` (None: all) in [t0, t1], or None."""
        if t0 is None or t1 is None:
            return None
        us = []
        for g, rows in self.by_gpu.items():
            if gpus is not None and g not in gpus:
                continue
            us.extend(u for t, u in rows if t0 <= t <= t1)
        return sum(us) / len(us) / 100.0 if us else None


def problem_key(rec):
    p = rec.get("problem") or {}
    c = rec.get("candidate") or {}
    return "L{}/{}".format(p.get("level", "?"), p.get("id", "?")) + (
        "" if c.get("agent") == "reference" or not c.get("name") else "::{}#{}".format(c.get("name"), c.get("sample", 0))
    )


def summarize_problem(rec, samples):
    p = rec.get("problem") or {}
    timing = rec.get("timing") or {}
    phases_in = rec.get("phases") if isinstance(rec.get("phases"), dict) else None
    started, finished = num(rec.get("started_unix_s")), num(rec.get("finished_unix_s"))
    g = gpu_of(rec)
    busy = None
    if samples:
        busy = samples.busy({g} if g is not None else None, started, finished)
    return {
        "key": problem_key(rec),
        "level": p.get("level"),
        "id": p.get("id"),
        "name": p.get("name"),
        "candidate": get(rec, "candidate", "name"),
        "outcome": get(rec, "outcome", "kind") or "unknown",
        "wall_s": num(rec.get("wall_s")),
        "started_unix_s": started,
        "finished_unix_s": finished,
        "load_s": num(rec.get("load_s")),
        "build_ahead_s": num(rec.get("build_ahead_s")),
        "phases": {k: num(phases_in.get(k, 0.0)) for k in PHASES} if phases_in else None,
        "gpu": g,
        "speedup": num(timing.get("speedup")),
        "speedup_mean": num(timing.get("speedup_mean")),
        "speedup_of_medians": num(timing.get("speedup_of_medians")),
        "reference_median_ms": num(get(timing, "reference", "median_ms")),
        "candidate_median_ms": num(get(timing, "candidate", "median_ms")),
        "gpu_busy": busy,
        "timing_limit_s": timing_limit(timing),
    }


def timing_limit(timing):
    """The timed calls' own seconds, both sides (Σ samples_ms / 1000): what timing costs at
    the least (the overhead goal's limit, less the flushes, which make it a little larger). None
    without samples."""
    total, any_ = 0.0, False
    for side in ("reference", "candidate"):
        xs = get(timing, side, "samples_ms")
        if isinstance(xs, list):
            vals = [num(x) for x in xs]
            total += sum(v for v in vals if v is not None)
            any_ = any_ or bool(vals)
    return total / 1000.0 if any_ else None


TIMING_GOAL = 1.3  # timing within 1.3× of its limit (the overhead goal)


def timing_against_limit(problems):
    """Per run: the timing phase over the timed calls' own seconds, for the problems with
    both: how many are within TIMING_GOAL, the median ratio, and the worst ten."""
    rows = []
    for p in problems:
        # A record without a timing phase reads 0 there: not a ratio of 0.
        t = p["phases"]["timing_s"] if p["phases"] else None
        lim = p["timing_limit_s"]
        if t and lim:
            rows.append({"key": p["key"], "name": p["name"], "timing_s": t, "limit_s": lim, "ratio": t / lim})
    if not rows:
        return None
    ratios = sorted(r["ratio"] for r in rows)
    return {"n": len(rows), "within_goal": sum(1 for x in ratios if x <= TIMING_GOAL),
            "median_ratio": statistics.median(ratios),
            "timing_s": sum(r["timing_s"] for r in rows), "limit_s": sum(r["limit_s"] for r in rows),
            "worst": sorted(rows, key=lambda r: -r["ratio"])[:10]}


def active_wall(problems):
    """(max finished - min started, the same less pauses longer than RESUME_GAP_S, the pauses)."""
    spans = sorted(
        (p["started_unix_s"], p["finished_unix_s"])
        for p in problems
        if p["started_unix_s"] is not None and p["finished_unix_s"] is not None
    )
    if not spans:
        return None, None, []
    wall = max(f for _, f in spans) - spans[0][0]
    gaps = []
    reach = spans[0][1]
    for s, f in spans[1:]:
        if s - reach > RESUME_GAP_S:
            gaps.append(s - reach)
        reach = max(reach, f)
    return wall, wall - sum(gaps), gaps


def per_gpu(problems, wall_active, pauses, first_invocation):
    """Each GPU's occupancy: problems, Σ record wall, its share of the run's span (pauses
    excluded), how long before the run's end it finished its last problem (None where the run
    was paused: a resume's gap is no GPU's idle time), and when its first problem started
    after the kbench process did (None without run.sh's .invocations)."""
    spans = [p for p in problems if p["started_unix_s"] is not None and p["finished_unix_s"] is not None]
    if not spans:
        return []
    end = max(p["finished_unix_s"] for p in spans)
    by = {}
    for p in spans:
        by.setdefault(p["gpu"], []).append(p)
    out = []
    for g in sorted(by, key=lambda g: (g is None, g)):
        ps = by[g]
        busy = sum(p["finished_unix_s"] - p["started_unix_s"] for p in ps)
        first = min(p["started_unix_s"] for p in ps)
        out.append({
            "gpu": g,
            "problems": len(ps),
            "busy_s": busy,
            "busy_share": busy / wall_active if wall_active else None,
            "done_before_end_s": None if pauses else end - max(p["finished_unix_s"] for p in ps),
            "first_start_after_process_s": None if first_invocation is None else first - first_invocation,
        })
    return out


def judged(p):
    """A record with a finish time whose verdict ran a worker."""
    return p["finished_unix_s"] is not None and p["outcome"] not in ("no_kernel", "problem_error")


def stat_phase(problems, key):
    """Mean, max, the count of records over 0.5 s, and n of one phase over the records with it."""
    xs = [p["phases"][key] for p in problems if p["phases"] and p["phases"].get(key) is not None]
    return {"mean": mean(xs), "max": max(xs) if xs else None, "over_half_s": sum(1 for x in xs if x > 0.5),
            "n": len(xs)}


def read_invocations(run_dir):
    """Process wall time of run.sh's kbench invocations (<run>.invocations beside the run: a
    line "start end rc" each), and the invocations themselves, in order."""
    path = os.path.normpath(run_dir) + ".invocations"
    spans = []
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 2:
                try:
                    spans.append((float(parts[0]), float(parts[1])))
                except ValueError:
                    pass
    if not spans:
        return None
    spans.sort()
    return {"invocations": len(spans), "wall_s": sum(e - s for s, e in spans),
            "first_start_unix_s": spans[0][0], "spans": spans}


def read_cpu_speed(run_dir):
    """run.sh's samples of the host's single-core speed (<run>.cpu_speed beside the run: a line
    "unix_s before|after {"cores": {core: iterations/s}}" around each invocation): their count,
    the median over samples of each sample's mean over its cores, the lowest and the highest.
    None without the file or a readable sample."""
    path = os.path.normpath(run_dir) + ".cpu_speed"
    if not os.path.exists(path):
        return None
    rates = []
    with open(path) as f:
        for line in f:
            parts = line.split(None, 2)
            if len(parts) < 3:
                continue
            try:
                cores = json.loads(parts[2]).get("cores") or {}
                xs = [float(v) for v in cores.values()]
            except (ValueError, AttributeError, TypeError):
                continue
            if xs:
                rates.append(sum(xs) / len(xs))
    if not rates:
        return None
    return {"samples": len(rates), "median": statistics.median(rates), "min": min(rates), "max": max(rates)}


def interleaved(one, two):
    """Whether one run has an invocation started between two of the other's
    (ORDER=abba scaling.sh half: 2-GPU, 1-GPU, 1-GPU, 2-GPU), so that a drift in the host's
    speed over the session weighs on both sides alike rather than on the one run later."""
    s1 = [s for s, _ in (one.get("process_wall") or {}).get("spans", [])]
    s2 = [s for s, _ in (two.get("process_wall") or {}).get("spans", [])]

    def between(xs, ys):
        return bool(ys) and any(min(ys) < x < max(ys) for x in xs)

    return between(s1, s2) or between(s2, s1)


def resume_free_wall(problems, invocations):
    """What the invocations' wall time would have been in one go: the process wall less what
    each restart of a resumed run added, which is each later invocation's start before its first
    record began and each cut invocation's time after its last record finished (the start of the
    problems in flight, whose work was lost and done again). None without invocations; an
    invocation with no record of its own counts whole."""
    if not invocations:
        return None
    spans = invocations["spans"]
    total = 0.0
    for i, (s, e) in enumerate(spans):
        mine = [p for p in problems if p["started_unix_s"] is not None and p["finished_unix_s"] is not None
                and s <= p["started_unix_s"] <= e]
        total += e - s
        if not mine:
            continue
        if i > 0:
            total -= min(p["started_unix_s"] for p in mine) - s
        if i < len(spans) - 1:
            total -= max(0.0, e - max(p["finished_unix_s"] for p in mine))
    return total


def summarize_run(run_dir):
    recs = read_jsonl(os.path.join(run_dir, "records.jsonl"))
    samples = Samples(read_jsonl(os.path.join(run_dir, "gpu_samples.jsonl")))
    manifest = {}
    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        pass
    # A resumed run can hold a problem twice only if the log was edited; keep the last.
    by_key = {}
    for r in recs:
        by_key[problem_key(r)] = r
    recs = list(by_key.values())
    problems = [summarize_problem(r, samples) for r in recs]
    problems.sort(key=lambda p: (p["level"] if isinstance(p["level"], int) else 99,
                                 p["id"] if isinstance(p["id"], int) else 0, p["key"]))
    n = len(problems)
    wall, wall_active, gaps = active_wall(problems)
    phase_means = {k: mean(p["phases"][k] for p in problems if p["phases"]) for k in PHASES}
    with_phases = sum(1 for p in problems if p["phases"])
    timed = [p for p in problems if p["speedup"] is not None]
    within = [p for p in timed if abs(p["speedup"] - 1.0) <= SELF_SPEEDUP_TOL]
    outside = [p for p in problems if p not in within]
    gpus_used = sorted({p["gpu"] for p in problems if p["gpu"] is not None})
    busy = None
    if samples and problems and wall is not None:
        t0 = min(p["started_unix_s"] for p in problems if p["started_unix_s"] is not None)
        t1 = max(p["finished_unix_s"] for p in problems if p["finished_unix_s"] is not None)
        busy = samples.busy(set(gpus_used) if gpus_used else None, t0, t1)
    env = next((r.get("env") for r in recs if isinstance(r.get("env"), dict)), {}) or {}
    outcomes = {}
    for p in problems:
        outcomes[p["outcome"]] = outcomes.get(p["outcome"], 0) + 1

    def stat(key):
        xs = [p[key] for p in problems if p[key] is not None]
        return {"mean": mean(xs), "max": max(xs) if xs else None, "n": len(xs)}

    invocations = read_invocations(run_dir)
    compile_xs = [p["phases"]["compile_s"] for p in problems if p["phases"] and p["phases"]["compile_s"] is not None]
    return {
        "name": os.path.basename(os.path.normpath(run_dir)),
        "path": run_dir,
        "agent": manifest.get("agent") or get(recs[0], "candidate", "agent") if recs else manifest.get("agent"),
        "problems": n,
        "outcomes": outcomes,
        "ok": outcomes.get("ok", 0),
        "wall_s": wall,
        "wall_excluding_pauses_s": wall_active,
        "pauses_s": gaps,
        "s_per_problem": wall / n if wall is not None and n else None,
        "s_per_problem_excluding_pauses": wall_active / n if wall_active is not None and n else None,
        "process_wall": invocations,
        "resume_free_wall_s": resume_free_wall(problems, invocations),
        "cpu_speed": read_cpu_speed(run_dir),
        "per_gpu": per_gpu(problems, wall_active, gaps, invocations and invocations["first_start_unix_s"]),
        # The first verdict's time after kbench started (the overhead goal: within 60 s for a cold
        # load_inline set); None without run.sh's .invocations.
        # Verdicts that ran a kernel: a missing kernel or a broken problem file is recorded at
        # once, with no worker.
        "first_verdict_after_process_s": (
            min(p["finished_unix_s"] for p in problems if judged(p)) - invocations["first_start_unix_s"]
            if invocations and any(judged(p) for p in problems) else None),
        "worker_wait_s": stat_phase(problems, "worker_wait_s"),
        "timing_against_limit": timing_against_limit(problems),
        "sum_problem_wall_s": sum(p["wall_s"] for p in problems if p["wall_s"] is not None),
        "records_with_phases": with_phases,
        "mean_phases_s": phase_means,
        "gpus": gpus_used,
        "gpu_samples": sum(len(v) for v in samples.by_gpu.values()),
        "gpu_busy": busy,
        "timed": len(timed),
        "self_speedup_within_1pct": len(within),
        "self_speedup_within_1pct_fraction": len(within) / n if n else None,
        "self_speedup_of_medians_within_1pct": sum(
            1 for p in problems if p.get("speedup_of_medians") is not None and abs(p["speedup_of_medians"] - 1) <= 0.01),
        "self_speedup_outside_1pct": [
            {"key": p["key"], "name": p["name"], "outcome": p["outcome"], "speedup": p["speedup"]} for p in outside
        ],
        "load_s": stat("load_s"),
        "build_ahead_s": stat("build_ahead_s"),
        "compile_s": {"mean": mean(compile_xs), "max": max(compile_xs) if compile_xs else None, "n": len(compile_xs)},
        "device_name": env.get("device_name"),
        "torch": env.get("torch"),
        "kbench": env.get("kbench") or manifest.get("kbench_version"),
        "per_problem": problems,
    }


def pair(a, b):
    """Per-problem agreement of median speedups between runs a and b."""
    pa = {p["key"]: p for p in a["per_problem"]}
    pb = {p["key"]: p for p in b["per_problem"]}
    common = sorted(set(pa) & set(pb), key=lambda k: [pa[k]["level"] or 0, pa[k]["id"] or 0, k])
    rows, outliers, agree = [], [], 0
    for k in common:
        sa, sb = pa[k]["speedup"], pb[k]["speedup"]
        ratio = sa / sb if sa is not None and sb else None
        ok = ratio is not None and abs(ratio - 1.0) <= PAIR_TOL
        ma, mb = pa[k]["speedup_mean"], pb[k]["speedup_mean"]
        row = {"key": k, "name": pa[k]["name"], "a": sa, "b": sb, "ratio": ratio,
               "ratio_mean": ma / mb if ma is not None and mb else None, "agree": ok}
        rows.append(row)
        if ok:
            agree += 1
        else:
            outliers.append(row)
    return {
        "a": a["name"],
        "b": b["name"],
        "common": len(common),
        "only_a": sorted(set(pa) - set(pb)),
        "only_b": sorted(set(pb) - set(pa)),
        "agree_within_2pct": agree,
        "agree_fraction": agree / len(common) if common else None,
        "outliers": outliers,
        "per_problem": rows,
    }


def scaling(one, two):
    w1 = one["wall_excluding_pauses_s"]
    w2 = two["wall_excluding_pauses_s"]
    # The kbench processes' own wall time (from run.sh's .invocations) counts each restart of a
    # resumed run but no gap between invocations, which the records' span includes when it
    # is shorter than RESUME_GAP_S: both ratios are given, and the lower one is the
    # figure to quote.
    p1 = (one.get("process_wall") or {}).get("wall_s")
    p2 = (two.get("process_wall") or {}).get("wall_s")
    by_process = p1 / p2 if p1 and p2 else None
    by_records = w1 / w2 if w1 and w2 else None
    # Restarts inflate the side that was resumed, so neither figure above is the lower bound
    # when the 1-GPU side is the one resumed: the third takes them out.
    r1, r2 = one.get("resume_free_wall_s"), two.get("resume_free_wall_s")
    resume_free = r1 / r2 if r1 and r2 else None
    mixed = interleaved(one, two)
    # Interleaved runs' records' spans hold each other's blocks (the gaps shorter than
    # RESUME_GAP_S): that figure is given but not quoted.
    ratios = [x for x in (None if mixed else by_records, by_process, resume_free) if x is not None]
    c1, c2 = one.get("cpu_speed"), two.get("cpu_speed")
    return {
        # The host's single-core speed while each side ran (median of run.sh's samples), and
        # the ratio: outside CPU_SPEED_TOL the two sides did not have the same machine.
        "one_cpu_speed": c1 and c1["median"],
        "two_cpu_speed": c2 and c2["median"],
        "cpu_speed_ratio": c1["median"] / c2["median"] if c1 and c2 and c2["median"] else None,
        "interleaved": mixed,
        "one": one["name"],
        "two": two["name"],
        "one_wall_s": w1,
        "two_wall_s": w2,
        "speedup": by_records,
        "one_process_wall_s": p1,
        "two_process_wall_s": p2,
        "speedup_by_process_wall": by_process,
        "one_resume_free_s": r1,
        "two_resume_free_s": r2,
        "speedup_resume_free": resume_free,
        "speedup_conservative": min(ratios) if ratios else None,
        "same_problems": sorted(p["key"] for p in one["per_problem"]) == sorted(p["key"] for p in two["per_problem"]),
    }


# ----------------------------------------------------------------------------------------------
# Markdown


def f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def pct(x):
    return f(x, "{:.1%}")


def markdown(result):
    runs = result["runs"]
    out = ["# kbench throughput", ""]
    # The phase columns come from PHASES, so a phase added to the records gets its column
    # (a fixed list here once left the columns after it under the wrong headings).
    phase_heads = [p[:-2].replace("_", " ") for p in PHASES]
    heads = ["run", "problems", "ok", "wall s", "s/problem", "Σ problem wall s", *phase_heads,
             "GPU busy", "self-speedup ±1%", "device", "torch", "kbench"]
    out += [
        "| " + " | ".join(heads) + " |",
        "|---|" + "---:|" * (len(heads) - 4) + "---|---|---|",
    ]
    for r in runs:
        ph = r["mean_phases_s"]
        if r["agent"] in (None, "reference"):
            self_sp = "{}/{} ({})".format(r["self_speedup_within_1pct"], r["problems"],
                                          pct(r["self_speedup_within_1pct_fraction"]))
        else:
            self_sp = "n/a ({})".format(r["agent"])
        wall = f(r["wall_s"], "{:.0f}")
        spp = f(r["s_per_problem"])
        if r["pauses_s"]:
            wall += " ({} excl. pauses)".format(f(r["wall_excluding_pauses_s"], "{:.0f}"))
            spp += " ({})".format(f(r["s_per_problem_excluding_pauses"]))
        cells = [r["name"], r["problems"], r["ok"], wall, spp, f(r["sum_problem_wall_s"], "{:.0f}"),
                 *(f(ph[k]) for k in PHASES), pct(r["gpu_busy"]), self_sp,
                 r["device_name"] or "–", r["torch"] or "–", r["kbench"] or "–"]
        assert len(cells) == len(heads)
        out.append("| " + " | ".join(str(c) for c in cells) + " |")
    out.append("")
    out.append("Phase columns are means per problem in seconds (over records that have phases). "
               "GPU busy: mean NVML utilization of the run's GPUs while it ran. Self-speedup: "
               "reference runs only (the problem's own Model timed against itself).")
    out.append("")
    for r in runs:
        if r["process_wall"]:
            out.append("- {}: kbench process wall {} s over {} invocation(s)".format(
                r["name"], f(r["process_wall"]["wall_s"], "{:.0f}"), r["process_wall"]["invocations"]))
    if any(r["process_wall"] for r in runs):
        out.append("")
    if any(r["build_ahead_s"]["n"] or r["agent"] == "replay" for r in runs):
        out += ["## Compile", "",
                "| run | problems | load_s mean | load_s max | build_ahead_s mean | build_ahead_s max | compile phase mean | compile phase max | worker wait mean | worker wait max | waits > 0.5 s | first verdict after kbench started s |",
                "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in runs:
            if not (r["build_ahead_s"]["n"] or r["agent"] == "replay"):
                continue
            out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                r["name"], r["problems"], f(r["load_s"]["mean"]), f(r["load_s"]["max"]),
                f(r["build_ahead_s"]["mean"]), f(r["build_ahead_s"]["max"]),
                f(r["compile_s"]["mean"]), f(r["compile_s"]["max"]),
                f(r["worker_wait_s"]["mean"]), f(r["worker_wait_s"]["max"]), r["worker_wait_s"]["over_half_s"],
                f(r["first_verdict_after_process_s"], "{:.1f}")))
        out.append("")
    for p in result.get("pairs", []):
        out += ["## Agreement {} vs {}".format(p["a"], p["b"]), "",
                "{}/{} problems agree within ±2% on median speedup ({}).".format(
                    p["agree_within_2pct"], p["common"], pct(p["agree_fraction"]))]
        if p["only_a"] or p["only_b"]:
            out.append("Only in {}: {}; only in {}: {}.".format(
                p["a"], len(p["only_a"]), p["b"], len(p["only_b"])))
        if p["outliers"]:
            out += ["", "| problem | name | {} | {} | ratio | ratio (mean) |".format(p["a"], p["b"]),
                    "|---|---|---:|---:|---:|---:|"]
            for o in p["outliers"]:
                out.append("| {} | {} | {} | {} | {} | {} |".format(
                    o["key"], o["name"], f(o["a"], "{:.4f}"), f(o["b"], "{:.4f}"),
                    f(o["ratio"], "{:.4f}"), f(o["ratio_mean"], "{:.4f}")))
        out.append("")
    for s in result.get("scaling", []):
        out += ["## Scaling {} → {}".format(s["one"], s["two"]), "",
                "Wall {} s on {}, {} s on {}: {}× faster{}.".format(
                    f(s["one_wall_s"], "{:.0f}"), s["one"], f(s["two_wall_s"], "{:.0f}"), s["two"],
                    f(s["speedup"]), "" if s["same_problems"] else " (the runs hold different problems)")]
        if s.get("speedup_by_process_wall"):
            out.append("By the kbench processes' wall time (restarts counted, gaps between invocations "
                       "not): {} s and {} s, {}× faster.".format(
                           f(s["one_process_wall_s"], "{:.0f}"), f(s["two_process_wall_s"], "{:.0f}"),
                           f(s["speedup_by_process_wall"])))
        if s.get("speedup_resume_free"):
            out.append("Without what restarts added (each later invocation's start before its first "
                       "record, each cut one's time after its last): {} s and {} s, {}× faster.".format(
                           f(s["one_resume_free_s"], "{:.0f}"), f(s["two_resume_free_s"], "{:.0f}"),
                           f(s["speedup_resume_free"])))
        if s.get("speedup_by_process_wall") or s.get("speedup_resume_free"):
            out.append("Quote the lowest: {}×.".format(f(s["speedup_conservative"])))
        if s.get("interleaved"):
            out.append("The two runs' invocations interleave in time (ORDER=abba), so a drift of the "
                       "host's speed weighs on both; the records' spans hold each other's blocks, so "
                       "the first figure is not quoted.")
        if s.get("cpu_speed_ratio") is not None:
            ratio = s["cpu_speed_ratio"]
            out.append("Host single-core speed (cpu_speed.py, median of the samples around each "
                       "invocation): {} on {}, {} on {} ({}×).".format(
                           f(s["one_cpu_speed"], "{:.0f}"), s["one"], f(s["two_cpu_speed"], "{:.0f}"),
                           s["two"], f(ratio)))
            if abs(ratio - 1.0) > CPU_SPEED_TOL:
                out.append("**The two sides did not run at the same machine speed (more than {:.0f}% "
                           "apart): the scaling figure carries that difference.**".format(100 * CPU_SPEED_TOL))
        out.append("")
    for r in runs:
        if len(r["per_gpu"]) < 2:
            continue
        out += ["## {}: per GPU".format(r["name"]), "",
                "| GPU | problems | Σ problem wall s | share of the run's span | done before the end s | first problem started after kbench s |",
                "|---|---:|---:|---:|---:|---:|"]
        for g in r["per_gpu"]:
            out.append("| {} | {} | {} | {} | {} | {} |".format(
                "–" if g["gpu"] is None else g["gpu"], g["problems"], f(g["busy_s"], "{:.1f}"),
                pct(g["busy_share"]), f(g["done_before_end_s"], "{:.1f}"),
                f(g["first_start_after_process_s"], "{:.1f}")))
        out.append("")
    for r in runs:
        t = r["timing_against_limit"]
        if not t:
            continue
        out += ["## {}: timing against its limit".format(r["name"]), "",
                "The timing phase over the timed calls' own seconds (both sides' samples; the "
                "flushes not counted). Within {}×: {}/{}; median {}×; in all {} s of timing for {} s "
                "of timed calls.".format(TIMING_GOAL, t["within_goal"], t["n"], f(t["median_ratio"]),
                                          f(t["timing_s"], "{:.1f}"), f(t["limit_s"], "{:.1f}")), "",
                "| problem | name | timing s | timed calls s | ratio |", "|---|---|---:|---:|---:|"]
        for w in t["worst"]:
            out.append("| {} | {} | {} | {} | {} |".format(
                w["key"], w["name"], f(w["timing_s"]), f(w["limit_s"]), f(w["ratio"])))
        out.append("")
    for r in runs:
        outside = r["self_speedup_outside_1pct"]
        if outside and r["agent"] in (None, "reference"):
            out += ["## {}: self-speedup outside ±1% ({})".format(r["name"], len(outside)), "",
                    ", ".join("{} {} ({})".format(o["key"], o["name"], f(o["speedup"], "{:.3f}")
                                                  if o["speedup"] is not None else o["outcome"]) for o in outside), ""]
    for r in runs:
        slow = sorted((p for p in r["per_problem"] if p["wall_s"] is not None), key=lambda p: -p["wall_s"])[:SLOWEST]
        if not slow:
            continue
        out += ["## {}: slowest {}".format(r["name"], len(slow)), "",
                "| problem | name | outcome | wall s | ref open | worker wait | reference | inputs | compile | correctness | timing | stress | stress ref | load s | speedup | GPU busy |",
                "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in slow:
            ph = p["phases"] or {}
            out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                p["key"], p["name"], p["outcome"], f(p["wall_s"]), *(f(ph.get(k)) for k in PHASES),
                f(p["load_s"]), f(p["speedup"], "{:.3f}"), pct(p["gpu_busy"])))
        out.append("")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------------------------
# Command line


def resolve(name, runs):
    norm = os.path.normpath(name)
    for r in runs:
        if os.path.normpath(r["path"]) == norm or r["name"] == os.path.basename(norm):
            return r
    raise SystemExit("summarize.py: no run named {!r} among the RUN_DIRs".format(name))


def build(run_dirs, pairs=(), scalings=()):
    runs = []
    for d in run_dirs:
        if not os.path.exists(os.path.join(d, "records.jsonl")):
            print("summarize.py: {} has no records.jsonl, skipped".format(d), file=sys.stderr)
            continue
        runs.append(summarize_run(d))
    result = {"runs": runs, "pairs": [], "scaling": []}
    for a, b in pairs:
        result["pairs"].append(pair(resolve(a, runs), resolve(b, runs)))
    for one, two in scalings:
        result["scaling"].append(scaling(resolve(one, runs), resolve(two, runs)))
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    ap.add_argument("--out", help="results JSON")
    ap.add_argument("--md", help="results markdown")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("A", "B"),
                    help="two runs of the same selection: per-problem speedup agreement")
    ap.add_argument("--scaling", nargs=2, action="append", default=[], metavar=("ONE", "TWO"),
                    help="the same selection on one and on two GPUs: ratio of wall times")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args(argv)
    if a.self_test:
        from summarize_selftest import self_test  # the script's own folder is on sys.path

        return self_test()
    if not a.run_dirs:
        ap.error("give at least one RUN_DIR")
    # Optional comparisons are dropped when a run they name is absent (e.g. no second GPU).
    names = {os.path.basename(os.path.normpath(d)) for d in a.run_dirs if os.path.exists(os.path.join(d, "records.jsonl"))}
    paths = {os.path.normpath(d) for d in a.run_dirs}

    def present(x):
        return os.path.basename(os.path.normpath(x)) in names or os.path.normpath(x) in paths and os.path.exists(
            os.path.join(x, "records.jsonl"))

    pairs = [p for p in a.pair if all(present(x) for x in p)]
    scalings = [s for s in a.scaling if all(present(x) for x in s)]
    for dropped in [p for p in a.pair + a.scaling if p not in pairs and p not in scalings]:
        print("summarize.py: {} {} not both among the runs, comparison skipped".format(*dropped), file=sys.stderr)
    result = build(a.run_dirs, pairs, scalings)
    text = json.dumps(result, indent=1, sort_keys=False)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    md = markdown(result)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)
    if not a.out and not a.md:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
