"""Diagnostic: time a KernelBench problem's Model in this process (cuda events, L2 untouched),
and list the kernels one call launches. argv: problem files. KB_POISON=1 first fills and frees
8 GiB through the caching allocator (the candidate worker's poisoning)."""
import importlib.util, os, sys, torch
dev = torch.device("cuda:0")
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("p", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    torch.manual_seed(0)
    model = m.Model(*m.get_init_inputs()).to(dev)
    ins = [x.to(dev) if torch.is_tensor(x) else x for x in m.get_inputs()]
    if os.environ.get("KB_POISON"):
        t = torch.empty(8 << 30, dtype=torch.uint8, device=dev); t.fill_(0xA5); del t
    with torch.no_grad():
        for _ in range(3): model(*ins)
        torch.cuda.synchronize()
        ts = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); model(*ins); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
        ts.sort()
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            model(*ins); torch.cuda.synchronize()
    names = sorted({e.name[:90] for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
    print(f"{os.path.basename(path)} median {ts[10]:.3f} ms min {ts[0]:.3f} tag={os.environ.get('TAG','')} kernels={names}", flush=True)
    del model, ins; torch.cuda.empty_cache()
