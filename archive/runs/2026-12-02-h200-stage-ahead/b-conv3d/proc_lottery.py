# One fresh process: a KernelBench problem's Model timed alone (CUDA events, L2 flushed before
# each call); prints the median. Run several times to see whether medians differ by process.
import importlib.util, statistics, sys, torch
spec = importlib.util.spec_from_file_location("p", sys.argv[1]); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.manual_seed(42); init = m.get_init_inputs(); torch.manual_seed(42)
model = m.Model(*init).cuda(); x = [t.cuda() if isinstance(t, torch.Tensor) else t for t in m.get_inputs()]
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
out = []
with torch.no_grad():
    for i in range(35):
        flush.fill_(i & 0x7f); torch.cuda.synchronize()
        s.record(); model(*x); e.record(); e.synchronize()
        if i >= 5: out.append(s.elapsed_time(e))
print(sys.argv[1].split("/")[-1][:30], "median %.3f ms" % statistics.median(out), "min %.3f" % min(out))
