import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        r = json.loads(line)
        t = r.get("timing") or {}
        p = r["problem"]
        c, f = t.get("candidate") or {}, t.get("reference") or {}
        print(f"{path.split('/')[-2]:>10} L{p['level']}/{p['id']:<3} {r['outcome'].get('kind', r['outcome']) if isinstance(r['outcome'], dict) else r['outcome']} sp={t.get('speedup', 0):.4f} ref={f.get('median_ms', 0):.3f} cand={f and c.get('median_ms', 0):.3f} n={len(c.get('samples_ms', []))}")
