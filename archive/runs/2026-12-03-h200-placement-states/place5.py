"""Which per-process state puts L2/77's transposed convolution in its slow state (5.0 vs 6.5 ms)?
Modes, 8 placements of 11 calls each (1 untimed):
 A  nothing (control)      I inputs anew     O outputs/workspaces anew (spacer + empty_cache)
 W  parameters anew        P cuDNN plan cache evicted (limit 1, another conv run between)
 B  I+O+W                  X  I+O+W+P"""
import os
os.environ["TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT"] = "1"
import importlib.util, random, statistics, sys, time, torch
dev = torch.device("cuda:0"); random.seed(int(os.environ.get("SEED", "1")))
def timed(model, ins):
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); model(*ins); b.record(); b.synchronize(); return a.elapsed_time(b)
other = torch.nn.ConvTranspose3d(4, 4, 3).to(dev); ox = torch.rand(1, 4, 4, 4, 4, device=dev)
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("p", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    torch.manual_seed(0)
    model = m.Model(*m.get_init_inputs()).to(dev)
    base = [x.to(dev) if torch.is_tensor(x) else x for x in m.get_inputs()]
    name = os.path.basename(path)[:24]
    with torch.no_grad():
        for _ in range(3): model(*base)
        torch.cuda.synchronize()
        for mode in os.environ.get("MODES", "AIOWPBXA"):
            keep, meds = [], []
            ins = base
            for k in range(8):
                if mode in "IBX":
                    keep.append(ins); ins = [x.clone() if torch.is_tensor(x) else x for x in base]
                if mode in "WBX":
                    for p in list(model.parameters()) + list(model.buffers()):
                        keep.append(p.data); p.data = p.data.clone()
                if mode in "OBX":
                    keep.append(torch.empty(random.randint(1, 512) << 20, dtype=torch.uint8, device=dev))
                    torch.cuda.synchronize(); torch.cuda.empty_cache()
                if mode in "PX":
                    other(ox); torch.cuda.synchronize()
                model(*ins); torch.cuda.synchronize()
                ts = [timed(model, ins) for _ in range(10)]
                meds.append(statistics.median(ts))
            del keep
            torch.cuda.empty_cache()
            print(f"{name} {mode} pid {os.getpid()} spread {(max(meds)/min(meds)-1)*100:5.1f}% "
                  f"meds {[round(x, 2) for x in meds]}", flush=True)
    del model, base; torch.cuda.empty_cache()
