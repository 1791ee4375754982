"""In what order a run folder of this archive evaluated its kernels, which evaluations waited
inside their records for their build (`compile_s` over 1.5 s) while kernels after them were
already built, and how many kernels stood built and not yet started every 20 s.
Usage: python3 order.py call2-ready-first/lb_cold (the files' common prefix)."""
import gzip,json,sys,statistics
d=sys.argv[1]+'.'
op=lambda p: gzip.open(p,'rt') if p.endswith('.gz') else open(p)
bs=[json.loads(l) for l in op(d+'builds.jsonl')]
rs=[json.loads(l) for l in op(d+'records.jsonl.gz')]
ss=[json.loads(l) for l in op(d+'gpu_samples.jsonl.gz')]
t0=min(r['started_unix_s'] for r in rs)
name=lambda b: b['candidate'].split('__replay__')[1].rsplit('__',1)[0]
bend={name(b):b['ended_unix_s']-t0 for b in bs}
bsec=[b['seconds'] for b in bs]
print('builds: n %d median %.1f p90 %.1f max %.1f; last build end %.1f'%(len(bs),statistics.median(bsec),sorted(bsec)[int(.9*len(bsec))],max(bsec),max(bend.values())))
order=sorted(rs,key=lambda r:r['started_unix_s'])
plan=sorted(rs,key=lambda r:(int(r['candidate']['name'].split('_')[3]), int(r['candidate']['name'].split('_')[5])))
moved=sum(1 for a,b in zip(order,plan) if a['candidate']['name']!=b['candidate']['name'])
print('records %d, out of plan order at %d positions'%(len(rs),moved))
tw=0
for r in order:
    w=(r.get('phases') or {}).get('compile_s',0)
    if w>1.5:
        s=r['started_unix_s']-t0
        ready=[x['candidate']['name'] for x in rs if x['started_unix_s']>r['started_unix_s'] and bend.get(x['candidate']['name'],0)<s]
        tw+=w
        print('  %6.1f waited %5.1f s %s; later kernels already built then: %d'%(s,w,r['candidate']['name'],len(ready)))
print('total wait %.1f s'%tw)
first=min(r['finished_unix_s'] for r in rs)-t0; last=max(r['finished_unix_s'] for r in rs)-t0
x=[s['util_pct']>0 for s in ss if first<=s['t_unix_s']-t0<=last]
print('GPU busy between first and last verdict %.1f%% (%.0f-%.0f s)'%(100*sum(x)/len(x),first,last))
# ready-queue depth: built-but-not-started kernels over time
print('built, not yet started, every 20 s:', end=' ')
for t in range(0,int(last),20):
    built=sum(1 for r in rs if bend.get(r['candidate']['name'],1e9)<=t and r['started_unix_s']-t0>t)
    print(f'{t}:{built}',end=' ')
print()
