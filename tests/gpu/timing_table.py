"""The table of a timing-attack run (tests/gpu/integrity.sh timing-attacks): per kernel, for each run
given (before, after), its outcome and flag, the speedup it claimed, and what the harness's
clock supports; with --manifest, the corpus's expected verdict beside the observed one."""

import argparse
import json
import os


def records(path):
    with open(path) as f:
        return {json.loads(line)["candidate"]["name"]: json.loads(line) for line in f if line.strip()}


def verdict(r):
    o = r["outcome"]
    if o["kind"] == "ok":
        adv = (r.get("integrity") or {}).get("advisories") or []
        return "ok" + (f" ({', '.join(adv)})" if adv else "")
    return o["kind"] + (f": {o.get('flag') or o.get('rule') or ''}" if o.get("flag") or o.get("rule") else "")


def timing(r):
    t = r.get("timing") or {}
    h = t.get("harness_clock") or {}
    claimed = f"{t['speedup']:.3f}x" if "speedup" in t else "-"
    clock = f"{h['speedup']:.3f}x" if "speedup" in h else "-"
    excess = f"{h['excess_ms'] * 1e3:.1f} [{h['excess_low_ms'] * 1e3:.1f}, {h['excess_high_ms'] * 1e3:.1f}] us" if h else "-"
    return claimed, clock, excess


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--jsonl")
    ap.add_argument("--manifest")
    a = ap.parse_args()
    runs = [records(p) for p in a.runs]
    names = sorted(set().union(*runs))
    expect = {}
    if a.manifest:
        for e in json.load(open(a.manifest))["exploits"]:
            expect[os.path.splitext(os.path.basename(e["file"]))[0]] = e["expect"]
    head = ["kernel"]
    for p in a.runs:
        tag = os.path.basename(os.path.dirname(p))
        head += [f"{tag} verdict", f"{tag} speedup", f"{tag} clock supports", f"{tag} excess"]
    if expect:
        head.append("expected")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    out = open(a.jsonl, "w") if a.jsonl else None
    for n in names:
        row = [n]
        for p, run in zip(a.runs, runs):
            r = run.get(n)
            if r is None:
                row += ["-"] * 4
                continue
            claimed, clock, excess = timing(r)
            row += [verdict(r), claimed, clock, excess]
            if out:
                out.write(json.dumps({"run": p, "kernel": n, "verdict": verdict(r), "speedup": claimed,
                                      "clock_speedup": clock, "excess": excess,
                                      "gpu": r["env"].get("device_name"), "torch": r["env"].get("torch")}) + "\n")
        if expect:
            row.append(expect.get(n, "-"))
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
