import json,statistics as st,math,sys,gzip
def opener(p): return gzip.open(p,'rt') if p.endswith('.gz') else open(p)
for path in sys.argv[1:]:
    rs=[json.loads(l) for l in opener(path) if l.strip()]
    rs=[r for r in rs if r.get('timing')]
    pos={0:[],1:[]}
    for r in rs:
        t=r['timing']; a=t['reference']['samples_ms']; b=t['candidate']['samples_ms']
        n=min(len(a),len(b))
        for p in (0,1):
            lr=[math.log(b[i]/a[i]) for i in range(p,n,2)]
            if lr: pos[p].append(st.median(lr))
    print(path.split('/')[-2:], len(rs), 'warmup', rs[0]['timing'].get('warmup'), ' '.join(f"pos{p}: {st.median(v)*100:+.3f}% slower {sum(x>0 for x in v)}/{len(v)}" for p,v in pos.items()))
