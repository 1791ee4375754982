# Verdicts of every records file under the folders given: outcome tally, every record timed
# again (its notes), and windows with waits for a CPU over 0.5 ms.
import collections, glob, gzip, json, sys
for root in sys.argv[1:]:
    for f in sorted(glob.glob(root + "/**/*records.jsonl*", recursive=True)):
        op = gzip.open if f.endswith(".gz") else open
        tally = collections.Counter(); again = []; waits = []
        for l in op(f, "rt"):
            try: r = json.loads(l)
            except Exception: continue
            o = r["outcome"]; k = o["kind"] + (":" + o["flag"] if o.get("flag") else "")
            tally[k] += 1
            name = r["candidate"]["name"]
            notes = [n for n in (r.get("notes") or []) if "timed again" in n or "builds" in n]
            if notes or o.get("flag", "").startswith("time-claim"):
                again.append((name, k, notes))
            h = ((r.get("timing") or {}).get("harness_clock")) or {}
            if h.get("candidate_worker_wait_ms"):
                big = lambda key: sum(1 for x in h.get(key, []) if x > 0.5)
                waits.append((name, k, h.get("supported"), round(h.get("excess_ms", 0), 3),
                              big("candidate_worker_wait_ms"), big("candidate_harness_wait_ms"),
                              big("reference_worker_wait_ms"), big("reference_harness_wait_ms"),
                              len(h["candidate_worker_wait_ms"])))
        print(f"== {f}: {sum(tally.values())} records: {dict(tally.most_common())}")
        for a in again: print("  again:", a)
        print("  windows with waits > 0.5 ms (name kind supported excess cw ch rw rh of):")
        for w in sorted(waits, key=lambda r: -r[4] - r[5])[:12]: print("   ", w)
