"""Diagnostic: does rotating where a call's inputs and outputs lie make one process's median
time a stable figure? Virtual processes: each draws a new placement (a random spacer kept
allocated, the model built anew, inputs cloned anew), then times 40 calls two ways:
 static  one input set, outputs dropped after each call (kbench today)
 rotate  R input sets used in turn, the last K calls' outputs held (their blocks rotate)
An L2 flush (256 MiB fill) precedes every timed call. Prints per mode the share of pairs of
virtual processes whose medians are within 1% of each other."""
import importlib.util, itertools, os, random, statistics, sys, torch
dev = torch.device("cuda:0"); random.seed(int(os.environ.get("SEED", "1")))
VP, N, R, K = int(os.environ.get("VP", "12")), 40, 4, 4
flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
def timed(model, ins):
    flush.fill_(random.randint(0, 255))
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); out = model(*ins); b.record(); b.synchronize(); return a.elapsed_time(b), out
def within(meds):
    pairs = list(itertools.combinations(meds, 2))
    return sum(abs(a / b - 1) < 0.01 for a, b in pairs) / len(pairs)
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("p", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    name = os.path.basename(path)[:28]
    base_cpu = m.get_inputs()
    res = {"static": [], "rotate": []}
    keep = []
    with torch.no_grad():
        for vp in range(VP):
            keep.append(torch.empty(random.randint(1, 512) << 20, dtype=torch.uint8, device=dev))
            torch.manual_seed(0)
            model = m.Model(*m.get_init_inputs()).to(dev)
            sets = [[x.to(dev) if torch.is_tensor(x) else x for x in base_cpu] for _ in range(R)]
            for _ in range(3): timed(model, sets[0])
            order = ["static", "rotate"] if vp % 2 == 0 else ["rotate", "static"]
            for mode in order:
                ts, held = [], []
                for i in range(N):
                    ins = sets[i % R] if mode == "rotate" else sets[0]
                    t, out = timed(model, ins); ts.append(t)
                    if mode == "rotate":
                        held.append(out); held = held[-K:]
                    del out
                del held
                res[mode].append(statistics.median(ts))
            del model, sets
    for mode, meds in res.items():
        print(f"{name} {mode} within1% pairs {within(meds):.2f} spread {(max(meds)/min(meds)-1)*100:.2f}% "
              f"meds {[round(x, 3) for x in meds]}", flush=True)
    del keep; torch.cuda.empty_cache()
