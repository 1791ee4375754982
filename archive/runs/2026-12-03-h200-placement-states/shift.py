"""L2/77's two states (4.9 / 6.5 ms) against where its memory lies: in one process, per trial a
fresh allocator pool; a spacer of `k` 2-MiB pages taken first (before = everything moves) or
after the input (after = only the call's temporaries and output move). Prints the state, the
median, and the addresses (input, output) per trial."""
import importlib.util, os, statistics, sys, torch
dev = torch.device("cuda:0")
path = sys.argv[1]
spec = importlib.util.spec_from_file_location("p", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0)
model = m.Model(*m.get_init_inputs()).to(dev)
base = m.get_inputs()[0].to(dev)
def timed(x):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); y = model(x); b.record(); b.synchronize(); return a.elapsed_time(b), y
with torch.no_grad():
    for where in ("before", "after"):
        for k in range(0, 33):
            torch.cuda.synchronize(); torch.cuda.empty_cache()
            pool = torch.cuda.MemPool()
            with torch.cuda.use_mem_pool(pool):
                sp = torch.empty((k << 21) + 1, dtype=torch.uint8, device=dev) if where == "before" else None
                x = base.clone()
                sp2 = torch.empty((k << 21) + 1, dtype=torch.uint8, device=dev) if where == "after" else None
                model(x); torch.cuda.synchronize()
                ts, ptr_y = [], 0
                for _ in range(8):
                    t, y = timed(x); ts.append(t); ptr_y = y.data_ptr(); del y
            med = statistics.median(ts)
            print(f"{where} k={k:2d} {'S' if med > 5.7 else 'F'} {med:.2f} x={x.data_ptr():#x} y={ptr_y:#x} x%2M={x.data_ptr() % (1<<21):#x}", flush=True)
            del sp, sp2, x, pool
