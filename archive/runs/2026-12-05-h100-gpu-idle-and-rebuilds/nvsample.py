# NVML's own utilisation samples (driver timestamps, microseconds) until killed, one JSON line each.
import json, sys, time, signal
import pynvml
pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0)
out = open(sys.argv[1], "w"); last = 0; stop = False
def bye(*_):
    global stop; stop = True
signal.signal(signal.SIGTERM, bye)
while not stop:
    try:
        typ, samples = pynvml.nvmlDeviceGetSamples(h, pynvml.NVML_GPU_UTILIZATION_SAMPLES, last)
        for s in samples:
            v = s.sampleValue.uiVal
            out.write(json.dumps([s.timeStamp, v]) + "\n"); last = max(last, s.timeStamp)
    except pynvml.NVMLError as e:
        out.write(json.dumps(["err", str(e)]) + "\n")
    out.write(json.dumps(["poll", time.time(), pynvml.nvmlDeviceGetUtilizationRates(h).gpu]) + "\n")
    out.flush(); time.sleep(0.25)
