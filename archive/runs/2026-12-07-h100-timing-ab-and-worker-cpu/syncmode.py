"""CPU seconds a process spends waiting on the GPU, default scheduling against blocking sync
(cuDevicePrimaryCtxSetFlags before torch makes its context), and what blocking costs in
wake-up latency. Usage: syncmode.py spin|block|yield"""
import ctypes, sys, time, os, json
mode = sys.argv[1]
flags = {"spin": 1, "yield": 2, "block": 4, "auto": 0}[mode]
cu = ctypes.CDLL("libcuda.so.1")
assert cu.cuInit(0) == 0
dev = ctypes.c_int()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
if mode != "auto":
    r = cu.cuDevicePrimaryCtxSetFlags(dev, flags)
    assert r == 0, r
import torch
x = torch.randn(4096, 16384 * 4, device="cuda")  # 1 GiB
torch.cuda.synchronize()
res = {"mode": mode}
for name, n, f in (("relu_1GiB", 200, lambda: torch.relu(x)), ("tiny", 2000, lambda: x[:1, :256].add_(0))):
    for _ in range(10): f()
    torch.cuda.synchronize()
    c0 = time.process_time(); w0 = time.perf_counter(); gpu = 0.0; lat = []
    for _ in range(n):
        s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter(); s.record(); f(); e.record(); e.synchronize(); t1 = time.perf_counter()
        g = s.elapsed_time(e); gpu += g; lat.append((t1 - t0) * 1e3 - g)
    lat.sort()
    res[name] = {"wall_s": round(time.perf_counter() - w0, 3), "cpu_s": round(time.process_time() - c0, 3),
                 "gpu_ms_mean": round(gpu / n, 4), "host_minus_gpu_ms_p50": round(lat[n // 2], 4),
                 "p90": round(lat[n * 9 // 10], 4)}
print(json.dumps(res))
