#!/usr/bin/env python3
"""Summarize a side-by-side run (Python 3 standard library only).

    summarize.py --state DIR --out results.json --md results.md

DIR is run.sh's state folder: env.txt (key=value lines, appended per call), selection.txt,
kb_timings.json (kb_eval.py: KernelBench's eval, seconds per problem) with
kernelbench.invocations, and per kbench run NAME (random, all) NAME/records.jsonl with
NAME.invocations ("start end rc" per call of the process) and NAME.done once it finished.

Seconds per problem: KernelBench's is the wall time of its batch_eval for that one problem
(a fresh worker process each). kbench's `marginal_s` is the time from the previous problem's
finish (or the process's start, for the first problem of a call) to this one's: kbench works
ahead on the next problem while one is timed, so its records overlap and a record's own
`wall_s` (`record_s`) does not add up to the run. Process wall is the sum over a step's calls
of its process's wall time (starts and resumes included). The ratios divide KernelBench's
seconds by kbench's: above 1, kbench is faster.
"""

import argparse
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kbench_records import PHASES, num, read_jsonl  # noqa: E402 (the shared reader, one folder up)

TOOLS = (
    ("kernelbench", "KernelBench eval"),
    ("random", "kbench --families random"),
    ("all", "kbench, every check"),
)
KBENCH_RUNS = ("random", "all")
KB_BREAKDOWN = ("worker_start_s", "eval_s", "after_s")
# A record finishing this long after its call's recorded end still counts to that call.
SLACK_S = 5.0


def read_invocations(path):
    """[(start, end, rc)] of a step's calls."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2:
                continue
            try:
                s, e = float(parts[0]), float(parts[1])
            except ValueError:
                continue
            rc = int(parts[2]) if len(parts) > 2 and parts[2].lstrip("-").isdigit() else None
            out.append((s, e, rc))
    return sorted(out)


def read_env(path):
    """env.txt: the last value of each key; every `gpu` line of the last call, and every GPU
    line seen over all calls (the steps may have run on different machines)."""
    env, gpus_last, gpus_all = {}, [], []
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.rstrip("\n").partition("=")
                if not sep:
                    continue
                if key == "invocation":
                    gpus_last = []
                    env["calls"] = env.get("calls", 0) + 1
                if key == "gpu":
                    gpus_last.append(value)
                    if value not in gpus_all:
                        gpus_all.append(value)
                else:
                    env[key] = value
    env["gpu"] = gpus_last
    env["gpus_over_calls"] = gpus_all
    return env


def key_of(level, pid):
    return "L{}/{}".format(level, pid)


def process_wall(invocations):
    return sum(e - s for s, e, _ in invocations) if invocations else None


def ratio(a, b):
    return a / b if a is not None and b else None


# ----------------------------------------------------------------------------------------------
# The tools


def kernelbench_tool(state):
    path = os.path.join(state, "kb_timings.json")
    data = {}
    if os.path.exists(path):
        with open(path) as f:
            data = json.load(f)
    inv = read_invocations(os.path.join(state, "kernelbench.invocations"))
    pw = process_wall(inv)
    if pw is None:  # run without run.sh: kb_eval.py's own clock readings
        spans = [(i.get("started_unix_s"), i.get("finished_unix_s")) for i in data.get("invocations", [])]
        spans = [(num(s), num(e)) for s, e in spans if num(s) is not None and num(e) is not None]
        pw = sum(e - s for s, e in spans) if spans else None
    problems = {}
    for p in data.get("problems", []):
        wall = num(p.get("wall_s"))
        if wall is None:
            continue
        name = p.get("name") or ""
        # KernelBench names a problem by its file (10_3D_tensor_matrix_multiplication.py);
        # kbench by the part after the id.
        name = re.sub(r"^\d+_", "", name[:-3] if name.endswith(".py") else name)
        problems[key_of(p.get("level"), p.get("id"))] = {
            "level": p.get("level"), "id": p.get("id"), "name": name or None,
            "seconds": wall,
            "correct": bool(p.get("correctness")),
            "error": p.get("error"),
            "speedup": num(p.get("speedup")),
            "runtime_ms": num(p.get("runtime_ms")),
            "ref_runtime_ms": num(p.get("ref_runtime_ms")),
            "breakdown_s": p.get("breakdown_s"),
        }
    bd = {k: mean([(p["breakdown_s"] or {}).get(k) for p in problems.values()]) for k in KB_BREAKDOWN}
    return {
        "problems": problems,
        "invocations": len(inv) or len(data.get("invocations", [])),
        "process_wall_s": pw,
        "sum_problem_s": sum(p["seconds"] for p in problems.values()),
        "outside_problems_s": pw - sum(p["seconds"] for p in problems.values()) if pw is not None else None,
        "mean_breakdown_s": bd,
        "settings": data.get("settings"),
        "stubbed_modules": data.get("stubbed_modules", []),
        "device_name": data.get("device_name"),
        "torch": data.get("torch"),
        "complete": os.path.exists(os.path.join(state, "kernelbench.done")),
        "correct": sum(1 for p in problems.values() if p["correct"]),
    }


def kbench_tool(state, name):
    recs = read_jsonl(os.path.join(state, name, "records.jsonl"))
    inv = read_invocations(os.path.join(state, name + ".invocations"))
    by_key = {}
    for r in recs:
        p = r.get("problem") or {}
        by_key[key_of(p.get("level"), p.get("id"))] = r  # a resumed run: the last one counts
    rows = []
    families = {}
    for r in by_key.values():
        for c in r.get("cases") or []:
            fam = (c.get("case") or {}).get("family") or "?"
            t = c.get("times") if isinstance(c.get("times"), dict) else {}
            agg = families.setdefault(fam, {"cases": 0, "not_applicable": 0, "total_s": 0.0, "reference_s": 0.0,
                                            "candidate_s": 0.0, "judge_s": 0.0, "max_total_s": 0.0, "max_problem": None})
            agg["cases"] += 1
            agg["not_applicable"] += 1 if c.get("not_applicable") else 0
            for part in ("total_s", "reference_s", "candidate_s", "judge_s"):
                agg[part] += num(t.get(part)) or 0.0
            total = num(t.get("total_s")) or 0.0
            if total > agg["max_total_s"]:
                p = r.get("problem") or {}
                agg["max_total_s"], agg["max_problem"] = total, key_of(p.get("level"), p.get("id"))
    for k, r in by_key.items():
        p = r.get("problem") or {}
        started, finished = num(r.get("started_unix_s")), num(r.get("finished_unix_s"))
        if finished is None:
            continue
        wall = num(r.get("wall_s"))
        if wall is None and started is not None:
            wall = finished - started
        ph = r.get("phases") if isinstance(r.get("phases"), dict) else None
        timing = r.get("timing") or {}
        rows.append({
            "key": k, "level": p.get("level"), "id": p.get("id"), "name": p.get("name"),
            "started_unix_s": started, "finished_unix_s": finished, "record_s": wall,
            "outcome": (r.get("outcome") or {}).get("kind") or "unknown",
            "speedup": num(timing.get("speedup")), "speedup_mean": num(timing.get("speedup_mean")),
            "phases": {ph_k: num(v) for ph_k, v in ph.items()} if ph else None,
            "containment": (r.get("env") or {}).get("containment"),
            "env": r.get("env") or {},
        })
    rows.sort(key=lambda x: x["finished_unix_s"])
    # marginal_s: from the previous finish in the same call, or from the call's start.
    prev_finish = {}
    for row in rows:
        f = row["finished_unix_s"]
        call = next((i for i, (s, e, _) in enumerate(inv) if s <= f <= e + SLACK_S), None)
        if call is None:
            start = prev_finish.get(None, row["started_unix_s"] if row["started_unix_s"] is not None else f)
        else:
            start = prev_finish.get(call, inv[call][0])
        row["marginal_s"] = f - start
        prev_finish[call] = f
    problems = {row["key"]: row for row in rows}
    env = next((row["env"] for row in rows if row["env"]), {})
    for row in rows:
        del row["env"]
    phase_names = list(PHASES) + sorted({k for r in rows if r["phases"] for k in r["phases"]} - set(PHASES))
    spans = [(r["started_unix_s"], r["finished_unix_s"]) for r in rows if r["started_unix_s"] is not None]
    return {
        "problems": problems,
        "invocations": len(inv),
        "process_wall_s": process_wall(inv),
        "records_span_s": max(f for _, f in spans) - min(s for s, _ in spans) if spans else None,
        "sum_problem_s": sum(r["marginal_s"] for r in rows),
        "sum_record_s": sum(r["record_s"] for r in rows if r["record_s"] is not None),
        "mean_phases_s": {k: mean([(r["phases"] or {}).get(k) for r in rows]) for k in phase_names},
        "complete": os.path.exists(os.path.join(state, name + ".done")),
        "correct": sum(1 for r in rows if r["outcome"] == "ok"),
        "device_name": env.get("device_name"),
        "torch": env.get("torch"),
        "kbench": env.get("kbench"),
        "containment": sorted({r["containment"] for r in rows if r["containment"]}),
        # Seconds per case family from the records' per-case `times` (absent in records
        # written before they were measured): where the stress families' cost goes.
        "case_times_by_family": families,
    }


def mean(xs):
    xs = [num(x) for x in xs]
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


# ----------------------------------------------------------------------------------------------
# Together


def compare(kb, other):
    """KernelBench's seconds over kbench's, on the problems both evaluated."""
    common = sorted(set(kb["problems"]) & set(other["problems"]), key=_order)
    per = [ratio(kb["problems"][k]["seconds"], other["problems"][k]["marginal_s"]) for k in common]
    per = [x for x in per if x is not None]
    same = set(kb["problems"]) == set(other["problems"]) and bool(common)
    kb_spp = ratio(kb["process_wall_s"], len(kb["problems"]))
    ot_spp = ratio(other["process_wall_s"], len(other["problems"]))
    return {
        "common_problems": len(common),
        "same_problems": same,
        "by_process_wall_per_problem": ratio(kb_spp, ot_spp),
        "by_process_wall": ratio(kb["process_wall_s"], other["process_wall_s"]) if same else None,
        "by_sum_of_problems": ratio(sum(kb["problems"][k]["seconds"] for k in common),
                                    sum(other["problems"][k]["marginal_s"] for k in common)) if common else None,
        "per_problem_median": statistics.median(per) if per else None,
        "per_problem_min": min(per) if per else None,
        "per_problem_max": max(per) if per else None,
    }


def stress_added(per_problem):
    """What every check adds to the random cases alone, per problem: a problem's record
    seconds with every check over its record seconds with `--families random`, less one
    (the overhead goal: at most +50% on every problem)."""
    added = {}
    for row in per_problem:
        ra, al = row["random"], row["all"]
        if ra and al and ra["outcome"] == "ok" and al["outcome"] == "ok":
            r = ratio(al["record_s"], ra["record_s"])
            if r is not None:
                added[row["key"]] = r - 1
    worst = max(added, key=added.get) if added else None
    return {
        "problems": len(added),
        "per_problem_median": statistics.median(added.values()) if added else None,
        "max": added[worst] if worst else None,
        "max_problem": worst,
        "over_half": sorted((k for k, v in added.items() if v > 0.5), key=_order),
    }


def _order(k):
    lv, _, pid = k[1:].partition("/")
    return (int(lv) if lv.isdigit() else 99, int(pid) if pid.isdigit() else 0)


def build(state):
    env = read_env(os.path.join(state, "env.txt"))
    selection = None
    if os.path.exists(os.path.join(state, "selection.txt")):
        with open(os.path.join(state, "selection.txt")) as f:
            selection = f.read().strip()
    kb = kernelbench_tool(state)
    runs = {name: kbench_tool(state, name) for name in KBENCH_RUNS}
    tools = {"kernelbench": kb, **runs}
    keys = sorted(set().union(*(set(t["problems"]) for t in tools.values())), key=_order)
    per_problem = []
    for k in keys:
        row = {"key": k, "name": None}
        for name, t in tools.items():
            p = t["problems"].get(k)
            row[name] = p
            if p and not row["name"]:
                row["name"] = p.get("name")
        for name in KBENCH_RUNS:
            a, b = row["kernelbench"], row[name]
            row["ratio_" + name] = ratio(a["seconds"], b["marginal_s"]) if a and b else None
        per_problem.append(row)
    ratios = {
        "kernelbench_over_kbench_random": compare(kb, runs["random"]),
        "kernelbench_over_kbench_all": compare(kb, runs["all"]),
        "stress_added": stress_added(per_problem),
    }
    for t in tools.values():
        n = len(t["problems"])
        t["problem_count"] = n
        t["s_per_problem"] = ratio(t["process_wall_s"], n)
        del t["problems"]
    gpu_names = env.get("gpu") or []
    return {
        "date": env.get("date"),
        "gpu": gpu_names,
        "gpus_over_calls": env.get("gpus_over_calls"),
        "device_name": kb.get("device_name") or runs["random"].get("device_name") or runs["all"].get("device_name"),
        "torch": env.get("torch") or kb.get("torch"),
        "kbench": env.get("kbench") or runs["random"].get("kbench"),
        "kernelbench_commit": env.get("kernelbench_commit"),
        "host_cpus": env.get("host_cpus"),
        "calls": env.get("calls"),
        "selection": selection or env.get("select"),
        "tools": tools,
        "ratios": ratios,
        "per_problem": per_problem,
    }


# ----------------------------------------------------------------------------------------------
# Markdown


def f(x, fmt="{:.2f}", none="–"):
    return none if x is None else fmt.format(x)


def times(x):
    return f(x, "{:.2f}×")


def markdown(res):
    t = res["tools"]
    out = ["# KernelBench's eval and kbench, side by side", ""]
    gpus = "; ".join(res["gpu"]) or res.get("device_name") or "–"
    out.append("- GPU: {}{}".format(gpus, " (**the calls ran on different GPUs**: {}; compare only steps "
                                           "that ran on one)".format("; ".join(res["gpus_over_calls"]))
                                     if len(res.get("gpus_over_calls") or []) > len(res["gpu"]) else ""))
    out.append("- torch {}; {}; KernelBench {}; {} CPUs; {} ({} call(s))".format(
        res["torch"] or "–", res["kbench"] or "kbench –", res["kernelbench_commit"] or "–",
        res["host_cpus"] or "–", res["date"] or "–", res["calls"] or "–"))
    out.append("- problems: `--select {}`".format(res["selection"] or "–"))
    if t["kernelbench"].get("stubbed_modules"):
        out.append("- KernelBench ran with stand-ins for modules not installed: {}".format(
            ", ".join(t["kernelbench"]["stubbed_modules"])))
    cont = sorted(set(t["random"]["containment"]) | set(t["all"]["containment"]))
    if cont:
        out.append("- kbench's candidate workers contained by: {}".format(", ".join(cont)))
    out += ["", "| tool | problems | correct | process wall s | s/problem | Σ per-problem s | calls | finished |",
            "|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, label in TOOLS:
        x = t[name]
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
            label, x["problem_count"], x["correct"], f(x["process_wall_s"], "{:.1f}"), f(x["s_per_problem"]),
            f(x["sum_problem_s"], "{:.1f}"), x["invocations"], "yes" if x["complete"] else "no"))
    out.append("")
    for name in KBENCH_RUNS:
        r = res["ratios"]["kernelbench_over_kbench_" + name]
        out.append("- **KernelBench / {}**: {} by process wall per problem{}; per problem median {} "
                   "(range {}–{}), by the sum over the {} common problems {}".format(
                       dict(TOOLS)[name], times(r["by_process_wall_per_problem"]),
                       "" if r["same_problems"] else " (not the same problems: compare per problem)",
                       times(r["per_problem_median"]), times(r["per_problem_min"]), times(r["per_problem_max"]),
                       r["common_problems"], times(r["by_sum_of_problems"])))
    sa = res["ratios"].get("stress_added") or {}
    if sa.get("problems"):
        out.append("- **Stress families' cost** (a problem's record seconds with every check over "
                   "`--families random`, both `ok`): median {}, most {} ({}); over +50% on {} of {} "
                   "problems{}".format(
                       "{:+.0%}".format(sa["per_problem_median"]), "{:+.0%}".format(sa["max"]),
                       sa["max_problem"], len(sa["over_half"]), sa["problems"],
                       ": " + ", ".join(sa["over_half"]) if sa["over_half"] else ""))
    bd = t["kernelbench"]["mean_breakdown_s"]
    out.append("- KernelBench's seconds per problem, mean: worker start (spawn, python, imports) {}, "
               "eval {}, after (result back, pool shut, results file) {}; outside the problems {} s "
               "(its driver's start)".format(f(bd["worker_start_s"]), f(bd["eval_s"]), f(bd["after_s"]),
                                             f(t["kernelbench"]["outside_problems_s"], "{:.1f}")))
    out += ["", "## Seconds per problem", "",
            "KernelBench: its batch_eval for the one problem (worker start + eval + after). kbench: "
            "from the previous problem's finish to this one's (record wall in brackets).", "",
            "| problem | name | KernelBench | start / eval / after | kbench random | kbench all | "
            "KB / random | KB / all | speedup KB · random · all |",
            "|---|---|---:|---|---:|---:|---:|---:|---|"]
    for row in res["per_problem"]:
        kb, ra, al = row["kernelbench"], row["random"], row["all"]
        b = (kb or {}).get("breakdown_s") or {}
        out.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            row["key"], row["name"] or "–",
            f(kb["seconds"]) + ("" if kb["correct"] else " ✗") if kb else "–",
            " / ".join(f(b.get(k), "{:.1f}") for k in KB_BREAKDOWN) if b else "–",
            _kb_cell(ra), _kb_cell(al), times(row["ratio_random"]), times(row["ratio_all"]),
            " · ".join(f((x or {}).get("speedup"), "{:.3f}") for x in (kb, ra, al))))
    out += ["", "✗: not correct (KernelBench) or not `ok` (kbench: the outcome is shown).", ""]
    out += ["## kbench phases per problem (seconds)", "",
            "| problem | run | marginal | record | " + " | ".join(p[:-2].replace("_", " ") for p in PHASES) + " |",
            "|---|---|---:|---:|" + "---:|" * len(PHASES)]
    for row in res["per_problem"]:
        for name in KBENCH_RUNS:
            x = row[name]
            if not x:
                continue
            ph = x["phases"] or {}
            out.append("| {} | {} | {} | {} | {} |".format(
                row["key"], name, f(x["marginal_s"]), f(x["record_s"]), " | ".join(f(ph.get(p)) for p in PHASES)))
    for name in KBENCH_RUNS:
        m = t[name]["mean_phases_s"]
        out.append("| mean | {} | {} | {} | {} |".format(
            name, f(ratio(t[name]["sum_problem_s"], t[name]["problem_count"])),
            f(ratio(t[name]["sum_record_s"], t[name]["problem_count"])), " | ".join(f(m.get(p)) for p in PHASES)))
    for name in KBENCH_RUNS:
        fams = {k: v for k, v in (t[name].get("case_times_by_family") or {}).items() if v["total_s"] > 0}
        if not fams:
            continue
        out += ["", f"## kbench seconds per case family, summed over the problems ({name})", "",
                "| family | cases | not applicable | total | reference | candidate | judge | slowest case |",
                "|---|---:|---:|---:|---:|---:|---:|---|"]
        for fam, v in fams.items():
            out.append("| {} | {} | {} | {} | {} | {} | {} | {} {} |".format(
                fam, v["cases"], v["not_applicable"], f(v["total_s"], "{:.1f}"), f(v["reference_s"], "{:.1f}"),
                f(v["candidate_s"], "{:.1f}"), f(v["judge_s"], "{:.1f}"), f(v["max_total_s"], "{:.1f}"),
                v["max_problem"] or ""))
    out.append("")
    return "\n".join(out) + "\n"


def _kb_cell(x):
    if not x:
        return "–"
    s = "{} ({})".format(f(x["marginal_s"]), f(x["record_s"]))
    return s if x["outcome"] == "ok" else s + " ✗ " + x["outcome"]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", required=True, help="run.sh's state folder")
    ap.add_argument("--out", help="results JSON")
    ap.add_argument("--md", help="results markdown")
    a = ap.parse_args(argv)
    res = build(a.state)
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(res, fh, indent=1)
            fh.write("\n")
    md = markdown(res)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(md)
    if not a.out and not a.md:
        sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
