#!/usr/bin/env python3
"""Issue 6: the exploit table (exploit, expected, raised) from kbench run logs.

    python3 tests/gpu/issue6_table.py MANIFEST RECORDS.jsonl [POLICY_RECORDS.jsonl] > table.md

RECORDS: a run over the corpus with the default policy; POLICY_RECORDS (optional): a run
with --require-custom-kernels. Standard library only. Exit 0 when every row matches.
"""
import json
import os
import sys


def load(path):
    out = {}
    if path and os.path.exists(path):
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                out[r["candidate"]["name"]] = r
    return out


def observed(r):
    """What a record shows: a list of tokens in the manifest's terms."""
    if r is None:
        return ["(no record)"]
    o = r["outcome"]
    kind = o["kind"]
    adv = [f"advisory:{a}" for a in ((r.get("integrity") or {}).get("advisories") or [])]
    if kind == "ok":
        return ["none"] + adv
    if kind == "integrity":
        return [f"flag:{o['flag']}"] + adv
    if kind == "mismatch":
        return [f"outcome:mismatch:{o['rule']}", f"outcome:mismatch:{o['case']['family']}"] + adv
    return [f"outcome:{kind}"] + adv


def matches(expect, seen, device_run_is_cuda):
    if "|" in expect:  # either is right (allocator-dependent)
        return any(matches(e, seen, device_run_is_cuda) for e in expect.split("|"))
    if expect in seen:
        return True
    # On the GPU, kernels written with torch ops are library kernels: honest ones get the
    # no-custom-kernel advisory, which does not fail them.
    if expect == "none" and seen and seen[0] == "none":
        return True
    # Without --require-custom-kernels, no-custom-kernel is an advisory.
    if expect.startswith("flag:") and f"advisory:{expect[5:]}" in seen and seen[0] == "none":
        return device_run_is_cuda
    return False


def main(argv):
    manifest = json.load(open(argv[1]))["exploits"]
    default = load(argv[2])
    policy = load(argv[3]) if len(argv) > 3 else {}
    cuda = any(r.get("device", "cpu") != "cpu" for r in default.values())
    rows, bad = [], 0
    for e in manifest:
        name = os.path.splitext(os.path.basename(e["file"]))[0]
        if e["device"] == "cuda" and not cuda:
            continue
        seen = observed(default.get(name))
        ok = matches(e["expect"], seen, cuda)
        seen_p = observed(policy.get(name)) if name in policy else None
        if seen_p is not None and e["expect"].startswith("flag:no-custom-kernel"):
            ok = ok and e["expect"] in seen_p
        if seen_p is not None and e["expect"] == "none" and e["device"] == "cuda":
            ok = ok and seen_p[0] == "none"
        bad += not ok
        kernels = ((default.get(name) or {}).get("integrity") or {}).get("kernels") or {}
        own = f"{100 * kernels['own_fraction']:.0f}%" if kernels else ""
        rows.append((e["row"], name, e["expect"], " / ".join(seen),
                     " / ".join(seen_p) if seen_p else "", own, e["kernelbench_stock"], "yes" if ok else "NO"))
    print("| row | exploit | expected | raised (default) | raised (--require-custom-kernels) | own-kernel time | KernelBench stock eval | match |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print(f"\n{len(rows) - bad}/{len(rows)} rows match", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
