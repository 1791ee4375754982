import json, sys, glob
for d in sys.argv[1:]:
    rs=[json.loads(l) for l in open(glob.glob(d+'/serve-run/public/records.jsonl')[0]) if l.strip()]
    ph={}
    opened=0
    order=[]
    for r in sorted(rs, key=lambda r: r['started_unix_s']):
        p=r.get('phases') or {}
        if (p.get('reference_open_s') or 0)>0: opened+=1
        order.append(r['problem']['id'])
        for k,v in p.items(): ph[k]=ph.get(k,0)+(v or 0)
    span=max(r['finished_unix_s'] for r in rs)-min(r['started_unix_s'] for r in rs)
    print(d, len(rs),'records; with a session opened:',opened, 'wall sum',round(sum(r['wall_s'] for r in rs),1),'span',round(span,1))
    print(' order', ''.join(str(i%10) for i in order))
    print(' ', {k:round(v,1) for k,v in sorted(ph.items(), key=lambda x:-x[1])})
