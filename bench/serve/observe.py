"""What the serve benchmark reads and computes besides the API (Python 3 standard library):
quantiles, the Prometheus text of /metrics, the GPU busy share from NVML samples or from the
service's cumulative busy ratio."""

import shutil
import subprocess
import threading
import time


# --- statistics -----------------------------------------------------------------------------


def quantile(values, q):
    """Linear interpolation between closest ranks (numpy's default, as kbench's reports)."""
    v = sorted(values)
    if not v:
        return None
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def quantiles(values):
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": quantile(values, 0.5),
        "p90": quantile(values, 0.9),
        "p99": quantile(values, 0.99),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def parse_prometheus(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition (comments skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        labels = {}
        if "{" in line:
            name, rest = line.split("{", 1)
            body, _, tail = rest.rpartition("}")
            i = 0
            while i < len(body):
                eq = body.index("=", i)
                key = body[i:eq].strip().lstrip(",").strip()
                j = eq + 2  # past ="
                val = []
                while body[j] != '"':
                    if body[j] == "\\":
                        j += 1
                        val.append({"n": "\n"}.get(body[j], body[j]))
                    else:
                        val.append(body[j])
                    j += 1
                labels[key] = "".join(val)
                i = j + 1
            fields = tail.split()
        else:
            name, *fields = line.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        out.append((name.strip(), labels, value))
    return out


def metric(samples, name, **labels):
    """The first sample of `name` whose labels include `labels`, or None."""
    for n, lab, v in samples:
        if n == name and all(lab.get(k) == str(x) for k, x in labels.items()):
            return v
    return None


def busy_ratios(samples):
    """{gpu: kbench_serve_gpu_busy_ratio}."""
    return {lab.get("gpu", "?"): v for n, lab, v in samples if n == "kbench_serve_gpu_busy_ratio"}


def clock_start(ratio_a, ratio_b, t_a, t_b):
    """When the service's busy clock started, from two reads of the cumulative busy ratio
    while no evaluation runs: r_a (t_a − S) = r_b (t_b − S), so S = (r_a t_a − r_b t_b) /
    (r_a − r_b). None unless some GPU's ratio fell between them (the median over GPUs)."""
    out = []
    for g, ra in ratio_a.items():
        rb = ratio_b.get(g)
        # A fall too small against float noise (reads close together) says nothing.
        if rb is not None and rb > 0 and ra - rb > 1e-4 * ra and t_b - t_a >= 0.5:
            s = (ra * t_a - rb * t_b) / (ra - rb)
            if s < t_a:
                out.append(s)
    return sorted(out)[len(out) // 2] if out else None


def busy_between(ratio_before, ratio_after, t_before, t_after, started):
    """Share of [t_before, t_after] an evaluation held each GPU, from the service's
    cumulative ratio (busy seconds / seconds since `started`) read at both ends."""
    out = {}
    for g, r1 in ratio_after.items():
        r0 = ratio_before.get(g, 0.0)
        busy = r1 * (t_after - started) - r0 * (t_before - started)
        out[g] = busy / (t_after - t_before) if t_after > t_before else None
    return out


# --- samplers -------------------------------------------------------------------------------


class GpuSampler:
    """GPU utilisation (NVML's `utilization.gpu`: the share of the last sample period in
    which a kernel ran) every `interval_s`: pynvml if importable, else `nvidia-smi -lms`,
    else nothing (`source` says which)."""

    def __init__(self, gpus=None, interval_s=0.2):
        self.gpus = None if gpus is None else {str(g) for g in gpus}
        self.interval_s = interval_s
        self.samples = []  # (unix_s, gpu, util_pct)
        self.source = None
        self.stop_evt = threading.Event()
        self.thread = None
        self.proc = None

    def start(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [(str(i), pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(pynvml.nvmlDeviceGetCount())]
            handles = [(g, h) for g, h in handles if self.gpus is None or g in self.gpus]
            self.source = "pynvml"

            def loop():
                while not self.stop_evt.wait(self.interval_s):
                    t = time.time()
                    for g, h in handles:
                        self.samples.append((t, g, float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)))

            self.thread = threading.Thread(target=loop, daemon=True)
            self.thread.start()
            return self
        except Exception:
            pass
        smi = shutil.which("nvidia-smi")
        if smi:
            ms = max(100, int(self.interval_s * 1000))
            self.proc = subprocess.Popen(
                [smi, "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits", "-lms", str(ms)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            self.source = "nvidia-smi"

            def read():
                for line in self.proc.stdout:
                    parts = [p.strip() for p in line.split(",")]
                    if len(parts) == 2 and (self.gpus is None or parts[0] in self.gpus):
                        try:
                            self.samples.append((time.time(), parts[0], float(parts[1])))
                        except ValueError:
                            pass

            self.thread = threading.Thread(target=read, daemon=True)
            self.thread.start()
        return self

    def stop(self):
        self.stop_evt.set()
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        if self.thread:
            self.thread.join(5)

    def busy(self, t0, t1):
        """{gpu: mean utilisation / 100 over samples in [t0, t1]} and the sample count."""
        per = {}
        for t, g, u in self.samples:
            if t0 <= t <= t1:
                per.setdefault(g, []).append(u)
        return {g: sum(v) / len(v) / 100.0 for g, v in sorted(per.items())}, sum(len(v) for v in per.values())


class MetricsSampler:
    """/metrics every `interval_s`: (unix_s, queue depth, {gpu: busy ratio})."""

    def __init__(self, api, interval_s=1.0):
        self.api = api
        self.interval_s = interval_s
        self.samples = []
        self.errors = 0
        self.stop_evt = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        while True:
            try:
                m = self.api.metrics()
                self.samples.append((time.time(), metric(m, "kbench_serve_queue_depth"), busy_ratios(m)))
            except Exception:
                self.errors += 1
            if self.stop_evt.wait(self.interval_s):
                return

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_evt.set()
        self.thread.join(20)

    def queue_empty_at(self, after):
        """The first sample after `after` with an empty queue: (unix_s, {gpu: busy ratio}),
        or None."""
        for t, depth, ratios in self.samples:
            if t > after and depth is not None and depth == 0:
                return t, ratios
        return None
