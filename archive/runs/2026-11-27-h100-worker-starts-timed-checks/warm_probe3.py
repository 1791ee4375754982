import time, sys
import torch
x = torch.zeros(1024, device="cuda"); torch.cuda.synchronize()
from torch.autograd.profiler import profile
mods0 = len(sys.modules)
for i in range(2):
    t0 = time.perf_counter()
    with profile(use_device="cuda", use_kineto=True, use_cpu=False) as p:
        x.add_(1.0); torch.mm(torch.ones(64, 64, device="cuda"), torch.ones(64, 64, device="cuda")); torch.cuda.synchronize()
    t1 = time.perf_counter()
    evs = [(e.name(), str(e.device_type()), e.device_resource_id()) for e in p.kineto_results.events()]
    print(f"autograd kineto cuda-only #{i}: {t1-t0:.3f}s, {len(sys.modules)-mods0} modules imported, events {evs}")
from torch.profiler import ProfilerActivity, profile as tprofile
t0 = time.perf_counter()
with tprofile(activities=[ProfilerActivity.CUDA]) as p2:
    x.add_(1.0); torch.mm(torch.ones(64, 64, device="cuda"), torch.ones(64, 64, device="cuda")); torch.cuda.synchronize()
t1 = time.perf_counter()
evs = [(e.name(), str(e.device_type()), e.device_resource_id()) for e in p2.profiler.kineto_results.events()]
print(f"torch.profiler after: {t1-t0:.3f}s, {len(sys.modules)-mods0} modules, events {evs}")
