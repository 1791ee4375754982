#!/usr/bin/env python3
"""Where two runs' worker time differs, command by command (Python 3 standard library only).

    worker_trace.py [--md OUT.md] RUN_A RUN_B
    worker_trace.py [--md OUT.md] RUN          # one run: its commands and its timing split
    worker_trace.py --self-test

RUN_A and RUN_B are kbench run directories whose workers ran with KBENCH_WORKER_TRACE=1: each
worker's log (RUN/logs/*.log) then has one line per command,

    kbench worker: <role> <command> <unix start> +<seconds>s

Made for the question the 4-GPU scaling run left open: its problems took 17% longer than
on one GPU, yet the reference workers' per-case times barely moved. Summing each (role,
command)'s seconds over the run on both sides shows whether the workers' own work slowed
(and which command) or whether the time went between commands, in the harness or in
waiting. A candidate's log is also its own output, so it could hold forged lines: for runs of
trusted kernels (the reference agent, the benchmarks), not as evidence about a candidate.
Per side: calls and seconds per (role, command), the reference workers' start-up
(torch's import, CUDA set-up) as two pseudo-commands, and per worker the time between its
first command's start and its last one's end not spent in a command ("between").
On a GPU each `time` command also logs where its seconds went (kbench_worker/timing.py):

    kbench worker: time split (<role>): <N> calls, samples <s>, before <s>, flush <s>, call <s>, untimed <s>, after <s>, loop <s>, release <s> (s)

summed per role into the timing split table (below), and after each command that made them
its driver-heavy steps (kbench_worker/protocol.py, DRIVER_SPLIT):

    kbench worker: driver split (<role> <command>): empty_cache 1 0.0123, gc 2 0.0040, ipc_close 3 0.0011, ipc_open 3 0.0052, sync 1 0.0004 (calls, s)

summed per (role, command, step) into the driver table: whether a command that slowed with
more GPUs at once lost its time in IPC mappings, the sync before unmapping, the collection or
the allocator's release. In the timing split: the timed calls' own seconds (samples), and
outside them fresh inputs and probes (before), the flush and synchronize before each call
(flush), the host's time from the start event to the end event's completion less the
samples (call − samples: launch and synchronize), the untimed calls opening each round
(untimed; logs before 2026-11-27 count them in call), outputs kept and checked (after), the loop
less those parts (loop), and the allocator's release after the round (release).
"""

import argparse
import glob
import os
import re
import shutil
import sys
import tempfile

LINE = re.compile(r"kbench worker: (\S+) (\S+) (\d+(?:\.\d+)?) \+(\d+(?:\.\d+)?)s\s*$")
# A reference worker's start (traced or not): python up to torch imported, and to CUDA ready.
SPLIT = re.compile(r"kbench worker: time split \((\S+)\): (\d+) calls, samples (\d+(?:\.\d+)?), (.*), "
                   r"loop (\d+(?:\.\d+)?), release (\d+(?:\.\d+)?) \(s\)\s*$")
SPLIT_PARTS = ("before", "flush", "call", "untimed", "after")
DRIVER = re.compile(r"kbench worker: driver split \((\S+) (\S+)\): (.*) \(calls, s\)\s*$")
STARTED = re.compile(r"kbench worker: reference started: .*torch imported \+(\d+(?:\.\d+)?)s, "
                     r"CUDA ready \+(\d+(?:\.\d+)?)s")


def read_run(run_dir):
    """{(role, command): [calls, seconds]}, the summed 'between' seconds per role and the
    summed timing splits per role."""
    totals, between, split, driver = {}, {}, {}, {}
    # Build jobs' logs (*.build.log) are candidate-role workers too, but not the evaluation's.
    logs = sorted(p for p in glob.glob(os.path.join(run_dir, "logs", "*.log")) if not p.endswith(".build.log"))
    for path in logs:
        spans = []
        role = None
        with open(path, errors="replace") as f:
            for line in f:
                m = DRIVER.search(line)
                if m:
                    for part in m.group(3).split(", "):
                        step, n, secs = part.split(" ")
                        t = driver.setdefault((m.group(1), m.group(2), step), [0, 0.0])
                        t[0] += int(n)
                        t[1] += float(secs)
                    continue
                m = SPLIT.search(line)
                if m:
                    row = split.setdefault(m.group(1), dict.fromkeys(
                        ("commands", "calls", "samples", *SPLIT_PARTS, "loop", "release"), 0.0))
                    row["commands"] += 1
                    row["calls"] += int(m.group(2))
                    row["samples"] += float(m.group(3))
                    for part in m.group(4).split(", "):
                        k, _, v = part.partition(" ")
                        if k in SPLIT_PARTS:
                            row[k] += float(v)
                    row["loop"] += float(m.group(5))
                    row["release"] += float(m.group(6))
                    continue
                m = STARTED.search(line)
                if m:
                    # Start-up as two pseudo-commands: not in "between" (no command spans).
                    imported, ready = float(m.group(1)), float(m.group(2))
                    for name, secs in (("(start: torch import)", imported), ("(start: CUDA set-up)", ready - imported)):
                        t = totals.setdefault(("reference", name), [0, 0.0])
                        t[0] += 1
                        t[1] += secs
                    continue
                m = LINE.search(line)
                if not m:
                    continue
                role, cmd, t0, dur = m.group(1), m.group(2), float(m.group(3)), float(m.group(4))
                t = totals.setdefault((role, cmd), [0, 0.0])
                t[0] += 1
                t[1] += dur
                spans.append((t0, t0 + dur))
        if spans and role is not None:
            spans.sort()
            busy = sum(e - s for s, e in spans)
            between[role] = between.get(role, 0.0) + (max(e for _, e in spans) - spans[0][0] - busy)
    return {"logs": len(logs), "totals": totals, "between": between, "split": split, "driver": driver}


def driver_markdown(runs):
    """The driver steps' table: calls and seconds per (role, command, step) for each run, and
    with two runs the second's seconds per call over the first's."""
    keys = sorted({k for _, run in runs for k in run["driver"]})
    if not keys:
        return []
    names = [name for name, _ in runs]
    head = "| role | command | step | " + " | ".join(f"calls {n} | s {n}" for n in names)
    rule = "|---|---|---|" + "---:|---:|" * len(runs)
    if len(runs) == 2:
        head += f" | per call {names[1]}/{names[0]}"
        rule += "---:|"
    out = ["", "Driver steps within commands (traced by the workers; seconds summed over the run):", "",
           head + " |", rule]
    for key in keys:
        cells = []
        per_call = []
        for _, run in runs:
            n, secs = run["driver"].get(key, [0, 0.0])
            cells += [str(n), f(secs, "{:.3f}")]
            per_call.append(secs / n if n else None)
        if len(runs) == 2:
            a, b = per_call
            cells.append(f(b / a if a and b is not None else None))
        out.append("| {} | {} | {} | {} |".format(*key, " | ".join(cells)))
    return out


def split_table(name, run):
    """Markdown rows of one run's timing split (seconds summed over its `time` commands)."""
    out = []
    for role, r in sorted(run["split"].items()):
        parts = sum(r[k] for k in SPLIT_PARTS)
        out.append("| {} | {} | {:.0f} | {:.0f} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            name, role, r["commands"], r["calls"], f(r["samples"]), f(r["before"]), f(r["flush"]),
            f(r["call"] - r["samples"]), f(r["untimed"]), f(r["after"]), f(r["loop"] - parts), f(r["release"]),
            f(r["loop"] + r["release"])))
    return out


def split_markdown(runs):
    out = ["", "Timing split (`time` commands on a GPU, seconds summed over the run):", "",
           "| run | role | commands | calls | samples | before | flush | call − samples | untimed | after | "
           "loop rest | release | in all |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = [row for name, run in runs for row in split_table(name, run)]
    return out + rows if rows else []


def single(name, run):
    out = ["# Worker commands: {}".format(name), "", "{} worker logs.".format(run["logs"]), "",
           "| role | command | calls | s |", "|---|---|---:|---:|"]
    for (role, cmd), (n, secs) in sorted(run["totals"].items(), key=lambda kv: -kv[1][1]):
        out.append("| {} | {} | {} | {} |".format(role, cmd, n, f(secs)))
    out += ["", "| role | between s |", "|---|---:|"]
    out += ["| {} | {} |".format(role, f(x)) for role, x in sorted(run["between"].items())]
    return "\n".join(out + split_markdown([(name, run)]) + driver_markdown([(name, run)])) + "\n"


def compare(a, b):
    rows = []
    for key in sorted(set(a["totals"]) | set(b["totals"])):
        na, sa = a["totals"].get(key, [0, 0.0])
        nb, sb = b["totals"].get(key, [0, 0.0])
        rows.append({"role": key[0], "command": key[1], "calls_a": na, "s_a": sa, "calls_b": nb, "s_b": sb,
                     "ratio": sb / sa if sa > 0 else None,
                     "per_call_ratio": (sb / nb) / (sa / na) if na and nb and sa > 0 else None})
    rows.sort(key=lambda r: -abs(r["s_b"] - r["s_a"]))
    between = []
    for role in sorted(set(a["between"]) | set(b["between"])):
        xa, xb = a["between"].get(role, 0.0), b["between"].get(role, 0.0)
        between.append({"role": role, "s_a": xa, "s_b": xb, "ratio": xb / xa if xa > 0 else None})
    return rows, between


def f(x, fmt="{:.2f}"):
    return "–" if x is None else fmt.format(x)


def markdown(name_a, name_b, a, b):
    rows, between = compare(a, b)
    out = ["# Worker commands: {} against {}".format(name_b, name_a), "",
           "{} worker logs in {}, {} in {}. Sorted by the difference in seconds.".format(
               a["logs"], name_a, b["logs"], name_b), "",
           "| role | command | calls A | s A | calls B | s B | B/A | B/A per call |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
            r["role"], r["command"], r["calls_a"], f(r["s_a"]), r["calls_b"], f(r["s_b"]),
            f(r["ratio"]), f(r["per_call_ratio"])))
    out += ["", "Between commands (a worker's span from its first command to its last, less its "
            "commands: waiting for the harness or the other worker):", "",
            "| role | s A | s B | B/A |", "|---|---:|---:|---:|"]
    for r in between:
        out.append("| {} | {} | {} | {} |".format(r["role"], f(r["s_a"]), f(r["s_b"]), f(r["ratio"])))
    out += split_markdown([(name_a, a), (name_b, b)])
    out += driver_markdown([(name_a, a), (name_b, b)])
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*")
    ap.add_argument("--md")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.self_test:
        return self_test()
    if len(args.runs) not in (1, 2):
        ap.error("give one run directory, or two to compare: RUN_A RUN_B")
    data = [read_run(r) for r in args.runs]
    for r, d in zip(args.runs, data):
        if not d["totals"]:
            print("worker_trace.py: {} has no traced worker lines (run it with KBENCH_WORKER_TRACE=1)".format(r),
                  file=sys.stderr)
            return 2
    names = [os.path.basename(os.path.normpath(r)) for r in args.runs]
    text = single(names[0], data[0]) if len(data) == 1 else markdown(*names, *data)
    if args.md:
        with open(args.md, "w") as fh:
            fh.write(text)
    sys.stdout.write(text)
    return 0


def self_test():
    failures = []

    def check(what, got, want):
        if (isinstance(want, float) and (got is None or abs(got - want) > 1e-9)) or (
                not isinstance(want, float) and got != want):
            failures.append("{}: got {!r}, want {!r}".format(what, got, want))

    tmp = tempfile.mkdtemp(prefix="kbench-worker-trace-")
    try:
        def write(run, name, lines):
            os.makedirs(os.path.join(tmp, run, "logs"), exist_ok=True)
            with open(os.path.join(tmp, run, "logs", name), "w") as fh:
                fh.write("\n".join(lines) + "\n")
        # A: one problem, reference make_case twice (1 s each, 0.5 s apart), candidate run_case.
        write("A", "p1__reference.log", [
            "kbench worker: reference started: spawned 99.000, python up 99.100, torch imported +2.50s, "
            "CUDA ready +2.75s (unix times)",
            "kbench worker: imported", "kbench worker: reference load 100.000 +2.000s",
            "kbench worker: reference make_case 102.000 +1.000s",
            "kbench worker: make_case random: 1.000s (inputs 0.1s)",
            "kbench worker: reference make_case 103.500 +1.000s", "kbench worker: reference exit 105.000"])
        write("A", "p1__cand.log", ["kbench worker: candidate run_case 103.000 +0.500s",
                                    "kbench worker: driver split (candidate run_case): gc 1 0.0100, ipc_open 2 0.0040 "
                                    "(calls, s)"])
        # A build job's log: not the evaluation's workers.
        write("A", "p1__cand.build.log", ["kbench worker: candidate load 90.000 +50.000s"])
        # B: the same commands, make_case 1.5 s each and 1.5 s apart.
        write("B", "p1__reference.log", [
            "kbench worker: reference started: spawned 99.000, python up 99.100, torch imported +2.50s, "
            "CUDA ready +3.25s (unix times)",
            "kbench worker: reference load 100.000 +2.000s",
            "kbench worker: reference make_case 102.000 +1.500s",
            "kbench worker: reference make_case 105.000 +1.500s"])
        # An old split line (no untimed part) and a new one: both read.
        write("B", "p1__cand.log", ["kbench worker: candidate run_case 104.000 +0.500s",
                                    "kbench worker: driver split (candidate run_case): empty_cache 1 0.0200, gc 1 0.0100, "
                                    "ipc_open 2 0.0080 (calls, s)",
                                    "kbench worker: candidate time 106.000 +0.300s",
                                    "kbench worker: time split (candidate): 3 calls, samples 0.0600, before 0.0100, "
                                    "flush 0.0200, call 0.0900, after 0.0050, loop 0.1400, release 0.0010 (s)",
                                    "kbench worker: candidate time 107.000 +0.300s",
                                    "kbench worker: time split (candidate): 3 calls, samples 0.0600, before 0.0100, "
                                    "flush 0.0200, call 0.0700, untimed 0.0200, after 0.0050, loop 0.1400, "
                                    "release 0.0010 (s)"])
        a, b = read_run(os.path.join(tmp, "A")), read_run(os.path.join(tmp, "B"))
        check("A make_case", a["totals"][("reference", "make_case")], [2, 2.0])
        check("A load", a["totals"][("reference", "load")], [1, 2.0])
        check("build logs left out", ("candidate", "load") in a["totals"], False)
        check("A torch import", a["totals"][("reference", "(start: torch import)")], [1, 2.5])
        check("A CUDA set-up", a["totals"][("reference", "(start: CUDA set-up)")], [1, 0.25])
        check("A between reference", a["between"]["reference"], 0.5)
        check("B between reference", b["between"]["reference"], 1.5)
        check("candidate between (3.3 s span, 1.1 s in commands)", b["between"]["candidate"], 2.2)
        rows, between = compare(a, b)
        check("largest difference first", (rows[0]["role"], rows[0]["command"]), ("reference", "make_case"))
        check("ratio", rows[0]["ratio"], 1.5)
        check("per-call ratio", rows[0]["per_call_ratio"], 1.5)
        check("CUDA set-up ratio", [r["ratio"] for r in rows if r["command"] == "(start: CUDA set-up)"], [3.0])
        check("unchanged load", [r["ratio"] for r in rows if r["command"] == "load"], [1.0])
        check("between ratio", [r["ratio"] for r in between if r["role"] == "reference"], [3.0])
        text = markdown("A", "B", a, b)
        check("table row", "| reference | make_case | 2 | 2.00 | 2 | 3.00 | 1.50 | 1.50 |" in text, True)
        check("split read", b["split"]["candidate"]["commands"], 2.0)
        check("split calls", b["split"]["candidate"]["calls"], 6.0)
        check("split call", b["split"]["candidate"]["call"], 0.16)
        check("split untimed", b["split"]["candidate"]["untimed"], 0.02)
        check("split not a command", ("time", "split") in b["totals"], False)
        check("time command counted", b["totals"][("candidate", "time")], [2, 0.6])
        check("split row", "| B | candidate | 2 | 6 | 0.12 | 0.02 | 0.04 | 0.04 | 0.02 | 0.01 | 0.03 | 0.00 | 0.28 |"
              in text, True)
        check("driver steps summed", b["driver"][("candidate", "run_case", "ipc_open")], [2, 0.008])
        check("driver line not a command", ("driver", "split") in b["totals"], False)
        check("driver row, per-call ratio", "| candidate | run_case | ipc_open | 2 | 0.004 | 2 | 0.008 | 2.00 |"
              in text, True)
        check("driver step only in B", "| candidate | run_case | empty_cache | 0 | 0.000 | 1 | 0.020 | – |" in text, True)
        one = single("B", b)
        check("single run has the driver steps", "| candidate | run_case | gc | 1 | 0.010 |" in one, True)
        check("single run has the split", "| B | candidate | 2 | 6 |" in one, True)
        check("single run lists commands", "| candidate | time | 2 | 0.60 |" in one, True)
        check("no traces is an error", main([os.path.join(tmp, "A"), os.path.join(tmp, "missing")]), 2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        for x in failures:
            print("FAIL", x)
        return 1
    print("self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
