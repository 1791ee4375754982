"""Can a worker set L2/77's state itself? One pool whose single 2 GiB segment is taken and
freed first; before each trial a shim of s KiB taken from the segment's start (the call's
temporaries then begin s KiB further), freed after. Prints the state per shim size."""
import importlib.util, statistics, sys, torch
dev = torch.device("cuda:0")
spec = importlib.util.spec_from_file_location("p", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(0)
model = m.Model(*m.get_init_inputs()).to(dev)
x = m.get_inputs()[0].to(dev)
def timed():
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); y = model(x); b.record(); b.synchronize(); return a.elapsed_time(b), y.data_ptr()
pool = torch.cuda.MemPool()
with torch.no_grad(), torch.cuda.use_mem_pool(pool):
    big = torch.empty(2 << 30, dtype=torch.uint8, device=dev); base = big.data_ptr(); del big
    for rep in range(2):
        for kib in (0, 2048, 0, 1024, 0, 4096, 0, 3072, 0, 512, 0, 6144, 0, 2048):
            shim = torch.empty(kib << 10, dtype=torch.uint8, device=dev) if kib else None
            model(x); torch.cuda.synchronize()
            ts = []
            for _ in range(8):
                t, py = timed(); ts.append(t)
            med = statistics.median(ts)
            print(f"shim {kib:5d} KiB {'S' if med > 5.7 else 'F'} {med:.2f} seg+{(py - base) >> 10} KiB", flush=True)
            del shim
