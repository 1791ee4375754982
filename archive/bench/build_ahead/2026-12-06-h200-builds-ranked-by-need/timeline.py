# Per run folder of this archive (new or old): evaluations, first and last verdict,
# GPU busy every 20 s, the evaluations that waited for their build, and each build's start and end
# (seconds from the first evaluation's start). Usage: python3 timeline.py new
import gzip,json,sys,re
v=sys.argv[1]
rs=[json.loads(l) for l in gzip.open(f"{v}/lb_cold.records.jsonl.gz","rt")]
t0=min(r["started_unix_s"] for r in rs)
ss=[json.loads(l) for l in gzip.open(f"{v}/lb_cold.gpu_samples.jsonl.gz","rt")]
def share(a,b):
    x=[s["util_pct"]>0 for s in ss if a<=s["t_unix_s"]-t0<=b]
    return round(sum(x)/max(1,len(x)),2)
first=min(r["finished_unix_s"] for r in rs)-t0; last=max(r["finished_unix_s"] for r in rs)-t0
print("evals",len(rs),"first",round(first,1),"last",round(last,1),"busy",share(first,last))
print(" ".join(f"{a}:{share(a,a+20)}" for a in range(0,int(last),20)))
for r in sorted(rs,key=lambda r:r["started_unix_s"]):
    w=(r.get("phases") or {}).get("compile_s",0)
    if w>1.5: print(f'  wait {r["started_unix_s"]-t0:6.1f} {r["candidate"]["name"][8:32]} {w:.1f}')
bs=sorted([json.loads(l) for l in open(f"{v}/lb_cold.builds.jsonl")],key=lambda b:b["started_unix_s"])
def nm(b):
    m=re.search(r"problem_(\d+)_sample_(\d+)",b["candidate"]); return m.group(1)+"/"+m.group(2)
print(" builds:", " ".join(nm(b)+":%.0f-%.0f"%(b["started_unix_s"]-t0,b["ended_unix_s"]-t0) for b in bs[:32]))
print(" outcomes", {k:sum(1 for r in rs if r["outcome"]["kind"]==k) for k in set(r["outcome"]["kind"] for r in rs)})
