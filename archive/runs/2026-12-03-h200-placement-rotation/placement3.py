"""Diagnostic: which memory's placement moves a kernel's time, and is the first call after a
release slow? One process per problem list. Modes, 8 placements of 11 calls each (1 untimed):
 A  nothing re-placed (control)
 I  inputs cloned anew (old clones kept, so the new ones land elsewhere)
 O  cache emptied after a random spacer is taken (outputs/workspaces land elsewhere)
 W  parameters cloned anew (old kept)
 B  all of I, O, W
 S  as B, then synchronize + 0.2 s sleep before the untimed call
Prints per mode: spread of placement medians, min/median/max, and first-timed/median ratio."""
import importlib.util, os, random, statistics, sys, time, torch
dev = torch.device("cuda:0"); random.seed(int(os.environ.get("SEED", "1")))
def timed(model, ins):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); model(*ins); b.record(); b.synchronize(); return a.elapsed_time(b)
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("p", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    torch.manual_seed(0)
    model = m.Model(*m.get_init_inputs()).to(dev)
    base = [x.to(dev) if torch.is_tensor(x) else x for x in m.get_inputs()]
    name = os.path.basename(path)[:28]
    with torch.no_grad():
        for _ in range(3): model(*base)
        torch.cuda.synchronize()
        for mode in "AIOWBS":
            keep, meds, firsts = [], [], []
            ins = base
            for k in range(8):
                if mode in "IBS":
                    keep.append(ins); ins = [x.clone() if torch.is_tensor(x) else x for x in base]
                if mode in "WBS":
                    for p in list(model.parameters()) + list(model.buffers()):
                        keep.append(p.data); p.data = p.data.clone()
                if mode in "OBS":
                    keep.append(torch.empty(random.randint(1, 512) << 20, dtype=torch.uint8, device=dev))
                    torch.cuda.synchronize(); torch.cuda.empty_cache()
                if mode == "S":
                    torch.cuda.synchronize(); time.sleep(0.2)
                model(*ins); torch.cuda.synchronize()
                ts = [timed(model, ins) for _ in range(10)]
                med = statistics.median(ts); meds.append(med); firsts.append(ts[0] / med)
            del keep
            torch.cuda.empty_cache()
            print(f"{name} {mode} pid {os.getpid()} spread {(max(meds)/min(meds)-1)*100:5.2f}% "
                  f"min {min(meds):.3f} med {statistics.median(meds):.3f} max {max(meds):.3f} "
                  f"first/med median {statistics.median(firsts):.4f} max {max(firsts):.4f} "
                  f"meds {[round(x, 3) for x in meds]}", flush=True)
    del model, base; torch.cuda.empty_cache()
