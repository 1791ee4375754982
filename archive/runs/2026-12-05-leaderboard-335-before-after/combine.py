#!/usr/bin/env python3
"""Before/after table of the claims report's reason classes over KernelBenchLeaderboard's
level-1 and level-2 kernels, from the claims files archived under archive/runs/.

Stdlib only. Reads every claims file named in BEFORE and AFTER below (or on the command
line), one row per kernel (level, problem, sample) each, and writes, next to this script
(or to --out DIR):

  per-kernel.csv  one row per kernel seen in any file: before class and file, after class
                  and file, whether both are the same row (one run only) and whether the
                  class got worse (a higher tier, see CLASSES);
  counts.md       the counts per reason class (before vs after), coverage by range, the
                  transition matrix and the kernels whose class got worse.

Rules:
  * BEFORE: the files in chronological order; a kernel's "before" is its FIRST evaluated
    row (a "not evaluated: no record in the run" row is used only when no file evaluated
    the kernel).
  * AFTER: the files in chronological order; a kernel's "after" is its LAST evaluated row
    (same exception). Later files win, so a new run is added by appending its claims file:
        python3 combine.py --add-after 2026-12-06-.../claims.json
    (file names are relative to archive/runs/, or absolute)
  * --before FILE... / --after FILE... replace the lists entirely.
  * --cross-check also parses the other formats the folders hold (txt beside csv, md beside
    csv, json beside md) and reports whether they agree row by row.

Formats read (each date wrote a different one):
  *.csv   `kbench report --claims` CSV: level,problem,sample,...,reason_category,reason.
          2026-11-25's had no reproduced/faster/slower split: "speedup not reproduced" with
          "(faster than claimed)" in the text, and an empty reason for a reproduced claim.
  *.md    the markdown report: "| L1/23 s0 | by | claimed | measured | verdict | reason |".
  *.txt   the text report (a run's whole stdout): "L1/14 s0  by  claimed  measured  verdict
          reason", columns aligned with spaces.
  *.json  the JSON report: rows[] with reason {"category": "faster-than-claimed", ...}.
"""

import argparse
import csv
import json
import os
import re
import sys
from collections import Counter, OrderedDict, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = os.path.dirname(HERE)

# Chronological; paths relative to archive/runs/.
BEFORE = [
    # H100, 2026-11-25 (binary of that day, strict profile before the fp32 error model):
    # L1/1-13 and L2/1-20, 83 kernels, all evaluated. L1/12 s0 was judged by the binary
    # before its speed-of-light fix (integrity flag); claims-L1-12-after-sol-fix.md, a later
    # call the same day, is left out on purpose so that "before" is the first judgement
    # (2026-12-02-h200-error-model's README counts it the same way).
    "2026-11-25-h100-nan-rule-and-leaderboard/claims-L1-1-13_L2-1-20.csv",
    # H100, 2026-11-25: L2/21-60, a partial run (14 claims, 13 evaluated; L2/40 s1 has no
    # record, so its "before" falls to the next file that evaluated it).
    "2026-11-25-h100-nan-rule-and-leaderboard/claims-L2-21-60-partial.csv",
    # H200, 2026-12-02, error model, binary 118202f: three calls in order. Never a first
    # evaluation for any kernel (2026-11-25 evaluated all 83), listed for completeness.
    "2026-12-02-h200-error-model/claims-L1-2-4-6.csv",
    "2026-12-02-h200-error-model/claims-L1-1-9.csv",
    "2026-12-02-h200-error-model/claims-L1-9-13_L2-1-20.csv",
    # H200, 2026-12-04 third session, call 1 (binary 0f86905, before the stress families
    # kept the inputs' structure): L1/14 s0-4 and L1/15 s0 evaluated, L1/15 s1-2 not. Only
    # the text report exists for this call. The first record of those six kernels.
    "2026-12-04-h200-level2-sweep-triton-structure/claims-before-structure.txt",
    # H200, 2026-12-04 third session, calls 2-3 (binary 7866f7f): L1/14-48, 128 kernels,
    # the first record of L1/15 s1 onwards. claims-method-rule.md: the same records under
    # the claims rule of ec8cf70, which landed after these calls (README); the as-run file
    # (claims-as-run.csv) differs only in 5 method-dependent -> slower than claimed.
    "2026-12-04-h200-level2-sweep-triton-structure/claims-method-rule.md",
    # H200, 2026-12-04 fourth session (binary d4615c1): L1/49-99 and L2/21-90 s1, 107
    # claims, 106 evaluated. claims-recomputed.md: the same records with the report code of
    # 1d198e4 (landed; the as-run file calls the three build failures "fails KernelBench's
    # check" instead of "does not build here").
    "2026-12-04-h200-leaderboard-rest-timing-attacks/claims-recomputed.md",
    # H200, 2026-12-05 (binary 7256973): L1/23 again and L2/90-100, 25 kernels; the report
    # was written by the run's own (landed) binary; json, md and txt agree (--cross-check).
    "2026-12-05-h200-leaderboard-level1-23-level2-90-100/claims.json",
    # H100, 2026-12-05 fifth session (binary d6b5e6d, two calls, resumed): L1/1-13 and
    # L2/1-20 again, 78 of the 83 kernels (two level-2 problems not started); the report was
    # written by the run's own binary; json, csv, md and txt agree (--cross-check). Its four
    # integrity flags (L1/4 s1-s4, timed-output-mismatch) are the false positive the timed
    # calls' absolute arm removed after this run (README).
    "2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.json",
    # H100, 2026-12-05 sixth session (binary e63b9e2, with the absolute arm): L1/4, L2/16 and
    # L2/20, the four false positives and the five kernels the fifth session did not start.
    "2026-12-05-h100-leaderboard-fix-rerun/claims.json",
]

# The same files: "after" takes the last evaluated row, so 2026-11-25's never win (every
# kernel they hold ran again on the H200). Append newer runs here or with --add-after.
AFTER = list(BEFORE)

# For --cross-check: (file used, another rendering of the same report or records).
CROSS = [
    ("2026-12-02-h200-error-model/claims-L1-2-4-6.csv", "2026-12-02-h200-error-model/claims-L1-2-4-6.txt"),
    ("2026-12-02-h200-error-model/claims-L1-1-9.csv", "2026-12-02-h200-error-model/claims-L1-1-9.txt"),
    ("2026-12-02-h200-error-model/claims-L1-9-13_L2-1-20.csv", "2026-12-02-h200-error-model/claims-L1-9-13_L2-1-20.txt"),
    ("2026-11-25-h100-nan-rule-and-leaderboard/claims-L1-1-13_L2-1-20.csv", "2026-11-25-h100-nan-rule-and-leaderboard/claims-L1-1-13_L2-1-20.md"),
    ("2026-11-25-h100-nan-rule-and-leaderboard/claims-L2-21-60-partial.csv", "2026-11-25-h100-nan-rule-and-leaderboard/claims-L2-21-60-partial.md"),
    ("2026-12-04-h200-level2-sweep-triton-structure/claims-as-run.csv", "2026-12-04-h200-level2-sweep-triton-structure/claims-as-run.md"),
    ("2026-12-04-h200-level2-sweep-triton-structure/claims-method-rule.md", "2026-12-04-h200-level2-sweep-triton-structure/claims-as-run.csv"),
    ("2026-12-04-h200-leaderboard-rest-timing-attacks/claims-as-run.csv", "2026-12-04-h200-leaderboard-rest-timing-attacks/claims-as-run.md"),
    ("2026-12-04-h200-leaderboard-rest-timing-attacks/claims-recomputed.md", "2026-12-04-h200-leaderboard-rest-timing-attacks/claims-as-run.csv"),
    ("2026-12-05-h200-leaderboard-level1-23-level2-90-100/claims.json", "2026-12-05-h200-leaderboard-level1-23-level2-90-100/claims.md"),
    ("2026-12-05-h200-leaderboard-level1-23-level2-90-100/claims.json", "2026-12-05-h200-leaderboard-level1-23-level2-90-100/claims.txt"),
    ("2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.json", "2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.csv"),
    ("2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.json", "2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.md"),
    ("2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.json", "2026-12-05-h100-leaderboard-level1-1-13-level2-1-20/claims.txt"),
    ("2026-12-05-h100-leaderboard-fix-rerun/claims.json", "2026-12-05-h100-leaderboard-fix-rerun/claims.csv"),
    ("2026-12-05-h100-leaderboard-fix-rerun/claims.json", "2026-12-05-h100-leaderboard-fix-rerun/claims.md"),
    ("2026-12-05-h100-leaderboard-fix-rerun/claims.json", "2026-12-05-h100-leaderboard-fix-rerun/claims.txt"),
]

# Reason classes as the claims report prints them (reports/src/claims/mod.rs,
# Reason::category, plus "reproduced" for a claim with no reason), in table order, with
# the tier used to call a change "worse": 0 survives, 1 correct but claim not met,
# 2 incorrect under kbench but passes KernelBench's own check, 3 flagged or fails
# KernelBench's own check / does not build. "not evaluated" has no tier.
CLASSES = OrderedDict([
    ("reproduced", 0),
    ("faster than claimed", 0),
    ("slower than claimed", 1),
    ("method-dependent", 1),
    ("slower, only library kernels ran", 1),
    ("slower, path chosen at run time", 1),
    ("tolerance-dependent", 2),
    ("model-mode dependent", 2),
    ("fails only a stress family", 2),
    ("integrity flag", 3),
    ("fails KernelBench's check", 3),
    ("does not build here", 3),
    ("not evaluated", None),
])
TIER_NAMES = {0: "survives", 1: "correct, claim not met", 2: "incorrect, passes KernelBench's check",
              3: "flagged / fails KernelBench's check / no build"}

# JSON reason categories (serde kebab-case of the Reason variants) -> printed class.
JSON_CATEGORY = {
    "not-evaluated": "not evaluated",
    "integrity-flag": "integrity flag",
    "model-mode": "model-mode dependent",
    "tolerance-dependent": "tolerance-dependent",
    "fails-kernelbench-check": "fails KernelBench's check",
    "does-not-build": "does not build here",
    "stress-only": "fails only a stress family",
    "slower-than-claimed": "slower than claimed",
    "faster-than-claimed": "faster than claimed",
    "times-itself": "slower, path chosen at run time",
    "method-dependent": "method-dependent",
    "library-only": "slower, only library kernels ran",
}

KERNEL_MD = re.compile(r"^\|\s*L(\d+)/(\d+) s(\d+)\s*\|")
KERNEL_TXT = re.compile(r"^L(\d+)/(\d+) s(\d+)\s")
PREFIXES = sorted(list(CLASSES) + ["agrees", "speedup not reproduced"], key=len, reverse=True)
REASON_IN_TXT = re.compile(r"\s(" + "|".join(re.escape(p) for p in PREFIXES) + r")(:|\s*$)")


def classify(text):
    """(class, sub-reason) from a reason as the reports print it."""
    text = (text or "").strip()
    if text in ("", "agrees", "reproduced"):
        return "reproduced", ""
    head, _, rest = text.partition(":")
    head, rest = head.strip(), rest.strip()
    if head == "speedup not reproduced":  # 2026-11-25's report, before the split
        return ("faster than claimed" if "(faster than claimed)" in rest else "slower than claimed"), ""
    if head not in CLASSES:
        raise ValueError("unknown reason class: %r" % text)
    if head in ("integrity flag", "fails only a stress family", "model-mode dependent"):
        sub = rest
    elif head == "fails KernelBench's check":
        sub = re.split(r"[\s:(]", rest, 1)[0]  # mismatch / compile_error / ...
    elif head == "does not build here":
        sub = "build error"
    else:
        sub = ""
    return head, sub


def parse_csv(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            reason = r["reason"] or r["reason_category"] or "agrees"  # 2026-11-25: empty = agrees
            rows.append(((int(r["level"]), int(r["problem"]), int(r["sample"])), reason))
    return rows


def parse_md(path):
    rows = []
    with open(path) as f:
        for line in f:
            m = KERNEL_MD.match(line)
            if m:
                cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
                rows.append(((int(m.group(1)), int(m.group(2)), int(m.group(3))), cells[-1]))
    return rows


def parse_txt(path):
    rows = []
    with open(path) as f:
        for line in f:
            m = KERNEL_TXT.match(line)
            if not m:
                continue
            r = REASON_IN_TXT.search(line.rstrip("\n"))
            if not r:
                raise ValueError("%s: no reason in %r" % (path, line))
            rows.append(((int(m.group(1)), int(m.group(2)), int(m.group(3))), line[r.start(1):].strip()))
    return rows


def parse_json(path):
    with open(path) as f:
        d = json.load(f)
    rows = []
    for r in d["rows"]:
        reason = r.get("reason")
        if reason is None:
            text = "reproduced"
        else:
            cls = JSON_CATEGORY[reason["category"]]
            if cls == "integrity flag":
                text = "%s: %s" % (cls, reason["flag"])
            elif cls == "fails only a stress family":
                text = "%s: %s%s" % (cls, ", ".join(reason["families"]),
                                     " (%s)" % reason["rule"] if reason.get("rule") else "")
            elif cls == "fails KernelBench's check":
                text = "%s: %s" % (cls, reason["outcome"])
            elif cls == "not evaluated":
                text = "%s: %s" % (cls, reason["why"])
            elif cls == "does not build here":
                text = "%s: %s" % (cls, reason["error"])
            else:
                text = cls
        rows.append(((int(r["level"]), int(r["problem"]), int(r["sample"])), text))
    return rows


def parse(path):
    full = path if os.path.isabs(path) else os.path.join(RUNS, path)
    ext = os.path.splitext(full)[1]
    rows = {".csv": parse_csv, ".md": parse_md, ".txt": parse_txt, ".json": parse_json}[ext](full)
    seen = set()
    out = []
    for key, text in rows:
        if key in seen:
            raise ValueError("%s: kernel %s twice" % (path, key))
        seen.add(key)
        cls, sub = classify(text)
        out.append((key, cls, sub, text))
    if not out:
        raise ValueError("%s: no kernel rows" % path)
    return out


def pick(files, last):
    """kernel -> (class, sub, text, file): first (or last) evaluated row; a not-evaluated
    row only where no file evaluated the kernel (then the first/last such row)."""
    chosen, fallback = {}, {}
    for path in files:
        for key, cls, sub, text in parse(path):
            slot = fallback if cls == "not evaluated" else chosen
            if last or key not in slot:
                slot[key] = (cls, sub, text, path)
    for key, v in fallback.items():
        chosen.setdefault(key, v)
    return chosen


def folder(path):
    return path.split("/")[-2] if "/" in path else path


def ranges(keys, universe):
    """Compact list such as "L1/16-22, L1/15 s1,s2" for a set of kernels: a problem all of
    whose kernels (in universe) are in the set is listed by number, runs of such problems
    joined (problems with no kernel at all are skipped over, so "L1/14-48" may span a
    problem number the set has no kernel for); a problem only partly in the set is listed
    with its samples."""
    keys = set(keys)
    per_prob = defaultdict(list)
    for k in universe:
        per_prob[k[:2]].append(k)
    parts = []
    run = []

    def flush():
        if run:
            lv = run[0][0]
            parts.append("L%d/%d" % (lv, run[0][1]) + ("-%d" % run[-1][1] if len(run) > 1 else ""))
            del run[:]

    prev = None
    for lp in sorted(per_prob):
        inset = sorted(k[2] for k in per_prob[lp] if k in keys)
        if not inset:
            flush()
        elif len(inset) == len(per_prob[lp]):
            if run and run[-1] != prev:
                flush()
            run.append(lp)
        else:
            flush()
            parts.append("L%d/%d %s" % (lp[0], lp[1], ",".join("s%d" % x for x in inset)))
        prev = lp
    flush()
    return ", ".join(parts)


def kname(k):
    return "L%d/%d s%d" % k


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", nargs="+", help="replace the BEFORE list (chronological)")
    ap.add_argument("--after", nargs="+", help="replace the AFTER list (chronological)")
    ap.add_argument("--add-after", nargs="+", default=[], help="append newer files to AFTER")
    ap.add_argument("--out", default=HERE, help="folder for per-kernel.csv and counts.md")
    ap.add_argument("--cross-check", action="store_true", help="compare renderings and exit")
    a = ap.parse_args()

    if a.cross_check:
        bad = 0
        for x, y in CROSS:
            px = {k: (c, s) for k, c, s, _ in parse(x)}
            py = {k: (c, s) for k, c, s, _ in parse(y)}
            diff = sorted(k for k in set(px) | set(py) if px.get(k) != py.get(k))
            print("%-80s vs %-22s %3d rows, %d differ%s" % (
                x, os.path.basename(y), len(px), len(diff),
                "".join("\n    %s: %s | %s" % (kname(k), px.get(k), py.get(k)) for k in diff)))
            bad += bool(diff)
        return 0

    before_files = a.before or BEFORE
    after_files = (a.after or AFTER) + a.add_after
    before = pick(before_files, last=False)
    after = pick(after_files, last=True)
    kernels = sorted(set(before) | set(after))

    def tier(c):
        return CLASSES[c]

    rows = []
    for k in kernels:
        b, f = before.get(k), after.get(k)
        worse = ""
        if b and f and tier(b[0]) is not None and tier(f[0]) is not None and tier(f[0]) > tier(b[0]):
            worse = "yes"
        rows.append((k, b, f, worse))

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "per-kernel.csv"), "w", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["level", "problem", "sample",
                    "before_class", "before_sub", "before_folder", "before_file",
                    "after_class", "after_sub", "after_folder", "after_file",
                    "same_record", "worse", "before_reason", "after_reason"])
        for k, b, f, worse in rows:
            same = "yes" if b and f and b[3] == f[3] else ""
            w.writerow(list(k)
                       + ([b[0], b[1], folder(b[3]), os.path.basename(b[3])] if b else ["", "", "", ""])
                       + ([f[0], f[1], folder(f[3]), os.path.basename(f[3])] if f else ["", "", "", ""])
                       + [same, worse, b[2] if b else "", f[2] if f else ""])

    # counts.md
    L = []
    n = len(kernels)
    groups = OrderedDict([
        ("all", rows),
        # before on the H100 (2026-11-25), after on the H200: a different GPU and code.
        ("before on H100", [r for r in rows if r[1] and r[2] and "h100" in folder(r[1][3])]),
        # before and after both H200, from different files, i.e. different runs (every
        # listed file is one run or call): a re-run after a fix.
        ("earlier H200 run", [r for r in rows if r[1] and r[2] and "h100" not in folder(r[1][3])
                         and r[1][3] != r[2][3]]),
        # one run only: before and after are the same row.
        ("one run only", [r for r in rows if r[1] and r[2] and r[1][3] == r[2][3]]),
    ])
    cnt = OrderedDict()
    for g, rs in groups.items():
        cnt[g] = (Counter(b[0] for _, b, _, _ in rs if b), Counter(f[0] for _, _, f, _ in rs if f))
    L.append("Kernels: %d (union of every file's rows). With a before row: %d; with an after "
             "row: %d. %s." % (n, len(before), len(after),
                               "; ".join("%s: %d" % (g, len(rs)) for g, rs in groups.items() if g != "all")))
    L.append("")
    L.append("| reason class | " + " | ".join("%s (%d): before | after" % (g, len(rs))
                                               for g, rs in groups.items()) + " |")
    L.append("|---|" + "---:|---:|" * len(groups))
    for c in list(CLASSES) + ["**total**"]:
        vals = []
        for g in groups:
            bc, ac = cnt[g]
            vals += ([bc[c], ac[c]] if c in CLASSES else [sum(bc.values()), sum(ac.values())])
        if c in CLASSES and not any(vals):
            continue
        L.append("| %s | %s |" % (c, " | ".join(str(v) for v in vals)))
    L.append("")
    L.append("By tier (worse = a higher tier after than before):")
    L.append("")
    L.append("| tier | " + " | ".join("%s: before | after" % g for g in groups) + " |")
    L.append("|---|" + "---:|---:|" * len(groups))
    for t, name in list(TIER_NAMES.items()) + [(None, "not evaluated")]:
        cs = [c for c in CLASSES if CLASSES[c] == t]
        vals = []
        for g in groups:
            bc, ac = cnt[g]
            vals += [sum(bc[c] for c in cs), sum(ac[c] for c in cs)]
        L.append("| %d %s | %s |" % (t if t is not None else -1, name, " | ".join(str(v) for v in vals))
                 if t is not None else "| %s | %s |" % (name, " | ".join(str(v) for v in vals)))
    L.append("")
    L.append("Failure sub-reasons (class: sub-reason):")
    L.append("")
    L.append("| class: sub-reason | before, all | after, all |")
    L.append("|---|---:|---:|")
    bs = Counter("%s: %s" % (b[0], b[1]) for _, b, _, _ in rows if b and b[1])
    as_ = Counter("%s: %s" % (f[0], f[1]) for _, _, f, _ in rows if f and f[1])
    for s in sorted(set(bs) | set(as_), key=lambda s: (list(CLASSES).index(s.split(":")[0]), s)):
        L.append("| %s | %d | %d |" % (s, bs[s], as_[s]))
    L.append("")
    L.append("Sources (kernels taken from each file):")
    L.append("")
    L.append("| file | before | after |")
    L.append("|---|---:|---:|")
    sb = Counter(b[3] for _, b, _, _ in rows if b)
    sf = Counter(f[3] for _, _, f, _ in rows if f)
    for p in OrderedDict.fromkeys(before_files + after_files):
        L.append("| `%s` | %d | %d |" % (p, sb[p], sf[p]))
    L.append("")
    L.append("Coverage by range:")
    L.append("")
    nob = [k for k in kernels if k not in before]
    noa = [k for k in kernels if k not in after]
    same = [k for k, b, f, _ in rows if b and f and b[3] == f[3]]
    L.append("- no before row: %d%s" % (len(nob), " (%s)" % ranges(nob, kernels) if nob else ""))
    L.append("- no after row: %d%s" % (len(noa), " (%s)" % ranges(noa, kernels) if noa else ""))
    L.append("- before and after are the same row (one run only): %d (%s)" % (len(same), ranges(same, kernels)))
    for lbl, keys in (("before not evaluated", [k for k, b, _, _ in rows if b and b[0] == "not evaluated"]),
                      ("after not evaluated", [k for k, _, f, _ in rows if f and f[0] == "not evaluated"])):
        L.append("- %s: %d%s" % (lbl, len(keys), " (%s)" % ", ".join(map(kname, keys)) if keys else ""))
    L.append("")
    L.append("Transitions (before -> after, kernels whose class changed):")
    L.append("")
    L.append("| before | after | kernels |")
    L.append("|---|---|---:|")
    tr = Counter((b[0], f[0]) for _, b, f, _ in rows if b and f and b[0] != f[0])
    for (x, y), v in sorted(tr.items(), key=lambda kv: -kv[1]):
        L.append("| %s | %s | %d |" % (x, y, v))
    L.append("")
    worse = [(k, b, f) for k, b, f, wv in rows if wv]
    L.append("Worse (higher tier after than before): %d" % len(worse))
    L.append("")
    if worse:
        L.append("| kernel | before | before folder | after | after folder |")
        L.append("|---|---|---|---|---|")
        for k, b, f in worse:
            L.append("| %s | %s | %s | %s | %s |" % (kname(k), b[2] if b[2] not in ("", b[0]) else b[0],
                                                     folder(b[3]), f[2], folder(f[3])))
        L.append("")
    changed_fail = [(k, b, f) for k, b, f, wv in rows
                    if b and f and not wv and b[1] != f[1] and (b[1] or f[1]) and tier(b[0]) and tier(f[0])
                    and tier(b[0]) >= 2 and tier(f[0]) >= 2]
    L.append("Failing before and after, with a different reason (not counted as worse): %d" % len(changed_fail))
    L.append("")
    if changed_fail:
        L.append("| kernel | before | after |")
        L.append("|---|---|---|")
        for k, b, f in changed_fail:
            L.append("| %s | %s | %s |" % (kname(k), b[2], f[2]))
        L.append("")
    with open(os.path.join(a.out, "counts.md"), "w") as fh:
        fh.write("\n".join(L))
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
