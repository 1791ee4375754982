import json, sys
def load(p): return {(r["problem"]["name"], r["candidate"]["name"], r["candidate"].get("sample")): r for r in map(json.loads, open(p))}
a=load(sys.argv[1]); b=load(sys.argv[2])
def diff(x,y,path=""):
    if type(x)!=type(y): print(path, repr(x)[:160], "|", repr(y)[:160]); return
    if isinstance(x,dict):
        for k in sorted(set(x)|set(y)):
            if k not in x or k not in y: print(path+"/"+k, "only in", "old" if k in x else "new", repr(x.get(k, y.get(k)))[:160]); continue
            diff(x[k],y[k],path+"/"+k)
    elif isinstance(x,list):
        if len(x)!=len(y): print(path,"len",len(x),len(y)); return
        for i,(p,q) in enumerate(zip(x,y)): diff(p,q,f"{path}[{i}]")
    elif x!=y: print(path, repr(x)[:160], "|", repr(y)[:160])
print("keys only old:", set(a)-set(b), "only new:", set(b)-set(a))
for k in sorted(set(a)&set(b)): diff(a[k],b[k],"/".join(map(str,k)))
