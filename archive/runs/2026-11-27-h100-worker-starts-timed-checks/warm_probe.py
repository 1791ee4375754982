import time, os, sys
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
torch.cuda.is_available(); t2 = time.perf_counter()
x = torch.zeros(1024, device="cuda"); torch.cuda.synchronize(); t3 = time.perf_counter()
from torch.profiler import ProfilerActivity, profile
t4 = time.perf_counter()
with profile(activities=[ProfilerActivity.CUDA]) as p:
    t5 = time.perf_counter()
    x.add_(1.0); torch.cuda.synchronize()
    t6 = time.perf_counter()
t7 = time.perf_counter()
with profile(activities=[ProfilerActivity.CUDA]):
    x.add_(1.0); torch.cuda.synchronize()
t8 = time.perf_counter()
print(f"import {t1-t0:.2f} is_available {t2-t1:.2f} context {t3-t2:.2f} import_profiler {t4-t3:.2f} profile_enter {t5-t4:.2f} body {t6-t5:.2f} profile_exit {t7-t6:.2f} second_profile {t8-t7:.2f}")
