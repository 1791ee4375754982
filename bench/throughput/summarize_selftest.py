#!/usr/bin/env python3
"""The self-test of summarize.py (run as `summarize.py --self-test`): run folders written
from made-up records and invocations, and every figure summarize.py derives from them checked.
Python 3 standard library only."""

import json
import os
import shutil
import tempfile

from summarize import main


def _record(level, pid, name, started, wall, speedup, speedup_mean=None, gpu=0, phases=True, kind="ok"):
    rec = {
        "schema_version": 1,
        "problem": {"suite": "kernelbench", "level": level, "id": pid, "name": name,
                    "file": "{}_{}.py".format(pid, name), "sha256": "0"},
        "candidate": {"agent": "reference", "name": "reference", "sample": 0, "source_path": None, "sha256": "0"},
        "device": "cuda:{}".format(gpu),
        "outcome": {"kind": kind},
        "cases": [],
        "timing": None if speedup is None else {
            "reference": {"median_ms": 1.0 * speedup, "mean_ms": 1.0},
            "candidate": {"median_ms": 1.0, "mean_ms": 1.0},
            "speedup": speedup,
            "speedup_mean": speedup if speedup_mean is None else speedup_mean,
        },
        "load_s": 0.5,
        "build_ahead_s": None,
        "wall_s": wall,
        "started_unix_s": started,
        "finished_unix_s": started + wall,
        "log_tail": "",
        "notes": [],
        "env": {"kbench": "0.9.0", "python": "3.11", "torch": "2.9.0+cu128", "device_name": "NVIDIA H100 80GB HBM3",
                "cuda": "12.8", "hostname": "h"},
    }
    if phases:
        rec["phases"] = {"worker_wait_s": 0.1, "reference_s": 1.0, "inputs_s": 0.5, "compile_s": 0.0,
                         "correctness_s": 0.4, "timing_s": wall - 1.5}
        rec["gpu"] = gpu
    return rec


def _write(d, records, samples=None, extra_lines=()):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "records.jsonl"), "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
        for line in extra_lines:
            fh.write(line + "\n")
    if samples is not None:
        with open(os.path.join(d, "gpu_samples.jsonl"), "w") as fh:
            for s in samples:
                fh.write(json.dumps(s) + "\n")


def self_test():
    failures = []

    def check(what, got, want, tol=1e-9):
        ok = (got is None and want is None) or (
            got is not None and want is not None and (
                abs(got - want) <= tol if isinstance(want, float) else got == want))
        if not ok:
            failures.append("{}: got {!r}, want {!r}".format(what, got, want))

    tmp = tempfile.mkdtemp(prefix="kbench-summarize-")
    try:
        t0 = 1_700_000_000.0
        # Run A: 4 problems back to back on GPU 0, 2 s each; one outside ±1% (1.05), one old
        # record without phases; samples at 50% in the first two problems and 100% after.
        a_recs = [
            _record(1, 1, "Matmul", t0, 2.0, 1.0),
            _record(1, 2, "ReLU", t0 + 2, 2.0, 1.009),
            _record(1, 3, "Softmax", t0 + 4, 2.0, 1.05, speedup_mean=1.04),
            _record(2, 1, "Conv", t0 + 6, 2.0, 0.995, phases=False),
        ]
        # Timed calls' samples on two of them: 0.2 s for a 0.5 s timing phase (2.5×) and 0.4 s
        # (1.25×, within the goal).
        for rec, ms in ((a_recs[0], 1.0), (a_recs[1], 2.0)):
            rec["timing"]["reference"]["samples_ms"] = [ms] * 100
            rec["timing"]["candidate"]["samples_ms"] = [ms] * 100
        a_samples = [{"t_unix_s": t0 + 0.5 + i, "gpu": 0, "util_pct": 50 if i < 4 else 100,
                      "sm_clock_mhz": 1980, "mem_used_bytes": 1, "temp_c": 40} for i in range(8)]
        a_samples.append({"t_unix_s": t0 + 1, "gpu": 1, "util_pct": 0})  # another GPU: ignored
        _write(os.path.join(tmp, "runA"), a_recs, a_samples, extra_lines=['{"cut off'])
        # Run B: the same problems, split over GPUs 0 and 1 (4 s wall), one failed, and a pause
        # of 1000 s (a resume) before the last record.
        b_recs = [
            _record(1, 1, "Matmul", t0, 2.0, 1.008),
            _record(1, 2, "ReLU", t0, 2.0, 1.0, gpu=1),
            _record(1, 3, "Softmax", t0 + 2, 2.0, None, kind="runtime_error"),
            _record(2, 1, "Conv", t0 + 1002, 2.0, 1.02, gpu=1),
        ]
        _write(os.path.join(tmp, "runB"), b_recs)
        with open(os.path.join(tmp, "runA.invocations"), "w") as fh:
            fh.write("{} {} 0\n".format(t0 - 1, t0 + 8))
        with open(os.path.join(tmp, "runB.invocations"), "w") as fh:
            fh.write("{} {} 124\n{} {} 0\n".format(t0 - 1, t0 + 5, t0 + 1000, t0 + 1005))
        # Run C: a replay run (run.json names the agent), built ahead.
        c_rec = _record(1, 19, "ReLU", t0, 3.0, 0.9)
        c_rec["candidate"] = {"agent": "replay", "name": "19_relu_cuda", "sample": 0}
        c_rec["build_ahead_s"] = 12.0
        c_rec["phases"]["compile_s"] = 0.25
        _write(os.path.join(tmp, "runC"), [c_rec])
        with open(os.path.join(tmp, "runC", "run.json"), "w") as fh:
            json.dump({"agent": "replay", "kbench_version": "0.9.0"}, fh)
        # Run D: one GPU, resumed 30 s after a cut (a pause the records' span keeps, under
        # RESUME_GAP_S): 1 s to its first record, cut 1 s after its third finished; the second
        # invocation 2 s to its first record.
        d_recs = [_record(1, k + 1, "P{}".format(k), t0 + 2 * k, 2.0, 1.0) for k in range(3)]
        d_recs.append(_record(2, 1, "Conv", t0 + 9 + 30, 2.0, 1.0))
        _write(os.path.join(tmp, "runD"), d_recs)
        with open(os.path.join(tmp, "runD.invocations"), "w") as fh:
            fh.write("{} {} 124\n{} {} 0\n".format(t0 - 1, t0 + 7, t0 + 37, t0 + 41))
        # Host speed samples (run.sh's cpu_speed): A's two (means 2500 and 3000, median 2750)
        # and a line that is not one; B's one (2000); D has none.
        with open(os.path.join(tmp, "runA.cpu_speed"), "w") as fh:
            fh.write('{} before {{"cores": {{"0": 3000, "31": 2000}}}}\n'.format(t0 - 3))
            fh.write("{} after not json\n".format(t0 + 8))
            fh.write('{} after {{"cores": {{"0": 3000, "31": 3000}}}}\n'.format(t0 + 9))
        with open(os.path.join(tmp, "runB.cpu_speed"), "w") as fh:
            fh.write('{} before {{"cores": {{"0": 2000}}}}\n'.format(t0 - 3))
        # Runs E and F: invocations interleaved (ORDER=abba): E, F, F, E.
        _write(os.path.join(tmp, "runE"), [_record(1, 1, "P", t0 + 1, 2.0, 1.0), _record(1, 2, "Q", t0 + 31, 2.0, 1.0)])
        _write(os.path.join(tmp, "runF"), [_record(1, 1, "P", t0 + 11, 2.0, 1.0), _record(1, 2, "Q", t0 + 21, 2.0, 1.0)])
        with open(os.path.join(tmp, "runE.invocations"), "w") as fh:
            fh.write("{} {} 0\n{} {} 0\n".format(t0, t0 + 4, t0 + 30, t0 + 34))
        with open(os.path.join(tmp, "runF.invocations"), "w") as fh:
            fh.write("{} {} 0\n{} {} 0\n".format(t0 + 10, t0 + 14, t0 + 20, t0 + 24))
        out_json = os.path.join(tmp, "r.json")
        out_md = os.path.join(tmp, "r.md")
        rc = main(["--out", out_json, "--md", out_md, "--pair", "runA", "runB",
                   "--scaling", os.path.join(tmp, "runA"), "runB", "--scaling", "runD", "runA",
                   "--scaling", "runE", "runF",
                   os.path.join(tmp, "runA"), os.path.join(tmp, "runB"), os.path.join(tmp, "runC"),
                   os.path.join(tmp, "runD"), os.path.join(tmp, "runE"), os.path.join(tmp, "runF"),
                   os.path.join(tmp, "missing")])
        check("rc", rc, 0)
        with open(out_json) as fh:
            res = json.load(fh)
        a, b, c, d, _, _ = res["runs"]
        check("A cpu speed", (a["cpu_speed"]["samples"], a["cpu_speed"]["median"]), (2, 2750.0))
        check("D no cpu speed", d["cpu_speed"], None)
        s_ab, s_da, s_ef = res["scaling"]
        check("A→B cpu speed ratio", s_ab["cpu_speed_ratio"], 2750.0 / 2000.0)
        check("D→A no cpu speed ratio", s_da["cpu_speed_ratio"], None)
        check("A→B not interleaved", s_ab["interleaved"], False)
        check("E→F interleaved", s_ef["interleaved"], True)
        # E's records span 32 s and F's 12 s (each holding the other's block): not quoted; by
        # process wall 8 s each.
        check("E→F span figure given", s_ef["speedup"], 32.0 / 12.0)
        check("E→F quotes the process wall, not the spans", s_ef["speedup_conservative"], 1.0)
        check("D→A not interleaved (A ran once)", s_da["interleaved"], False)
        check("C agent", c["agent"], "replay")
        check("C key", c["per_problem"][0]["key"], "L1/19::19_relu_cuda#0")
        check("C build ahead", c["build_ahead_s"]["max"], 12.0)
        check("C compile phase", c["compile_s"]["mean"], 0.25)
        check("C no invocations: no first verdict", c["first_verdict_after_process_s"], None)
        check("A first verdict", a["first_verdict_after_process_s"], 3.0)
        tl = a["timing_against_limit"]
        check("timing against limit: counted", (tl["n"], tl["within_goal"]), (2, 1))
        check("timing against limit: worst", (tl["worst"][0]["key"], round(tl["worst"][0]["ratio"], 6)), ("L1/1", 2.5))
        check("timing against limit: median", tl["median_ratio"], 1.875, tol=1e-9)
        check("no samples: no limit", b["timing_against_limit"], None)
        check("A worker wait mean", a["worker_wait_s"]["mean"], 0.1, tol=1e-12)
        check("A worker wait counts", (a["worker_wait_s"]["over_half_s"], a["worker_wait_s"]["n"]), (0, 3))
        check("A problems", a["problems"], 4)
        check("A wall", a["wall_s"], 8.0)
        check("A s/problem", a["s_per_problem"], 2.0)
        check("A sum wall", a["sum_problem_wall_s"], 8.0)
        check("A records with phases", a["records_with_phases"], 3)
        check("A mean timing phase", a["mean_phases_s"]["timing_s"], 0.5)
        check("A mean compile phase", a["mean_phases_s"]["compile_s"], 0.0)
        check("A within 1%", a["self_speedup_within_1pct"], 3)
        check("A within fraction", a["self_speedup_within_1pct_fraction"], 0.75)
        check("A outside", [o["key"] for o in a["self_speedup_outside_1pct"]], ["L1/3"])
        check("A busy overall", a["gpu_busy"], 0.75)
        pa = {p["key"]: p for p in a["per_problem"]}
        check("A busy L1/1", pa["L1/1"]["gpu_busy"], 0.5)
        check("A busy L1/3", pa["L1/3"]["gpu_busy"], 1.0)
        check("A old record phases", pa["L2/1"]["phases"], None)
        check("A old record gpu from device", pa["L2/1"]["gpu"], 0)
        check("A speedup_mean", pa["L1/3"]["speedup_mean"], 1.04)
        check("A device", a["device_name"], "NVIDIA H100 80GB HBM3")
        check("A torch", a["torch"], "2.9.0+cu128")
        check("A kbench", a["kbench"], "0.9.0")
        check("B problems", b["problems"], 4)
        check("B ok", b["ok"], 3)
        check("B wall", b["wall_s"], 1004.0)
        check("B pauses", b["pauses_s"], [998.0])
        check("B wall excl pauses", b["wall_excluding_pauses_s"], 6.0)
        check("B busy (no samples)", b["gpu_busy"], None)
        check("B gpus", b["gpus"], [0, 1])
        check("B within 1%", b["self_speedup_within_1pct"], 2)
        check("B outside", sorted(o["key"] for o in b["self_speedup_outside_1pct"]), ["L1/3", "L2/1"])
        check("B process wall", b["process_wall"]["wall_s"], 11.0)
        ga, = a["per_gpu"]
        check("A per GPU", (ga["gpu"], ga["problems"], ga["busy_s"], ga["busy_share"]), (0, 4, 8.0, 1.0))
        check("A first start after kbench", ga["first_start_after_process_s"], 1.0)
        check("A done before end", ga["done_before_end_s"], 0.0)
        g0, g1 = b["per_gpu"]
        check("B GPU 0", (g0["gpu"], g0["problems"], g0["busy_s"]), (0, 2, 4.0))
        check("B GPU 1 share", g1["busy_share"], 4.0 / 6.0)
        check("B paused: no idle at the end", g0["done_before_end_s"], None)
        p = res["pairs"][0]
        check("pair common", p["common"], 4)
        check("pair agree", p["agree_within_2pct"], 2)  # L1/1 (1/1.008) and L1/2 (1.009)
        check("pair outliers", [o["key"] for o in p["outliers"]], ["L1/3", "L2/1"])
        check("pair fraction", p["agree_fraction"], 0.5)
        s = res["scaling"][0]
        check("scaling", s["speedup"], 8.0 / 6.0)
        # By process wall A took 9 s and B 11 s (its restart counted, its pause not): the
        # lower ratio is the one to quote.
        check("scaling by process wall", s["speedup_by_process_wall"], 9.0 / 11.0)
        check("scaling conservative", s["speedup_conservative"], 9.0 / 11.0)
        # B less its restart: the second invocation's 2 s before its first record and the 1 s
        # the first ran after its last record finished.
        check("A resume-free wall", a["resume_free_wall_s"], 9.0)
        check("B resume-free wall", b["resume_free_wall_s"], 11.0 - 2.0 - 1.0)
        check("scaling resume-free", s["speedup_resume_free"], 9.0 / 8.0)
        # D (1 GPU, resumed) against A: its records' span keeps the 30 s pause (41 s), its
        # process wall the restart (12 s); without both, 12 - 2 - 1 = 9 s, the ratio to quote.
        sd = res["scaling"][1]
        check("D records' span", d["wall_excluding_pauses_s"], 41.0)
        check("D process wall", d["process_wall"]["wall_s"], 12.0)
        check("D resume-free wall", d["resume_free_wall_s"], 9.0)
        check("D→A by records", sd["speedup"], 41.0 / 8.0)
        check("D→A by process wall", sd["speedup_by_process_wall"], 12.0 / 9.0)
        check("D→A conservative is the resume-free one", sd["speedup_conservative"], 9.0 / 9.0)
        check("no invocations: no resume-free wall", c["resume_free_wall_s"], None)
        with open(out_md) as fh:
            md = fh.read()
        for needle in ("| runA | 4 | 4 | 8 | 2.00 |", "## Agreement runA vs runB", "2/4 problems agree",
                       "## runA: slowest 4", "## Scaling runA → runB", "1.33× faster",
                       "Quote the lowest: 0.82×", "9 s and 9 s, 1.00× faster", "L1/3 Softmax (1.050)",
                       "n/a (replay)", "## Compile", "2750 on runA, 2000 on runB (1.38×)",
                       "did not run at the same machine speed", "interleave in time (ORDER=abba)", "| runC | 1 | 0.50 | 0.50 | 12.00 | 12.00 | 0.25 | 0.25 |"):
            if needle not in md:
                failures.append("markdown lacks {!r}".format(needle))
        # Every cell of the summary table under its own heading: runA's last three are its
        # device, torch and kbench.
        table = md[md.index("| run | problems | ok |"):].split("\n\n")[0].splitlines()
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in table if not line.startswith("|---")]
        head, row_a = rows[0], next(r for r in rows if r[0] == "runA")
        if len(head) != len(row_a) or dict(zip(head, row_a)).get("kbench") != "0.9.0" \
                or dict(zip(head, row_a)).get("torch") != "2.9.0+cu128":
            failures.append("markdown: the summary table's cells are not under their headings: {}".format(table[:3]))
        if md.index("| run |") > md.index("slowest"):
            failures.append("markdown: the summary table must come first")
        if "runC: self-speedup outside" in md:
            failures.append("markdown: a replay run has no self-speedup section")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        for x in failures:
            print("FAIL", x)
        print("self-test: {} check(s) failed".format(len(failures)))
        return 1
    print("self-test: ok")
    return 0
