"""Diagnostic: does a kernel's time depend on where its memory lands? One process, blocks of
10 timed calls: A as is; B empty_cache between blocks; C empty_cache plus a random spacer
kept allocated; inputs cloned anew per block in B and C. argv: problem files."""
import importlib.util, os, random, statistics, sys, torch
dev = torch.device("cuda:0"); random.seed(int(os.environ.get("SEED", "1")))
def block(model, ins, n=10):
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); model(*ins); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    return statistics.median(ts)
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("p", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    torch.manual_seed(0)
    model = m.Model(*m.get_init_inputs()).to(dev)
    base = [x.to(dev) if torch.is_tensor(x) else x for x in m.get_inputs()]
    out = {}
    with torch.no_grad():
        for _ in range(3): model(*base)
        torch.cuda.synchronize()
        for mode in "ABC":
            meds, spacers = [], []
            for k in range(8):
                ins = base
                if mode != "A":
                    torch.cuda.empty_cache()
                    if mode == "C":
                        spacers.append(torch.empty(random.randint(1, 2048) << 20, dtype=torch.uint8, device=dev))
                    ins = [x.clone() if torch.is_tensor(x) else x for x in base]
                    model(*ins); torch.cuda.synchronize()
                meds.append(block(model, ins))
            del spacers
            out[mode] = meds
    name = os.path.basename(path)[:40]
    for mode, meds in out.items():
        print(f"{name} {mode} pid {os.getpid()} spread {(max(meds)/min(meds)-1)*100:.2f}% medians {[round(x, 3) for x in meds]}", flush=True)
    del model, base; torch.cuda.empty_cache()
