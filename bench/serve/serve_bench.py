#!/usr/bin/env python3
"""kbench serve under load, through its HTTP API (Python 3 standard library; pynvml or
nvidia-smi, when there, for GPU utilisation). See README.md beside this file.

  serve_bench.py --url http://127.0.0.1:8470 --token-file T --kernelbench KB --out DIR
  serve_bench.py --kernelbench KB --out DIR --dry-run      # the candidates, no HTTP
  serve_bench.py --self-test [--python PY]                 # no service, no GPU

Measures, in order (`--steps`):

  throughput  N distinct level-1 candidates (PyTorch and Triton) submitted at once:
              evaluations a minute from first submit to last verdict, per-verdict latency,
              GPU busy share while the queue is non-empty (NVML samples, and
              kbench_serve_gpu_busy_ratio from /metrics before and after)
  cached      K of those sources again, one at a time: submit→done wall time
  published   a published kernel set (--published DIR): counts by outcome, mean speedup

and writes results.json and summary.md under --out. A 429 or 503 is waited out
(Retry-After) and retried; every wait is bounded (--budget-s, --timeout-s).
"""

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import candidates  # noqa: E402
from observe import (  # noqa: E402
    GpuSampler,
    MetricsSampler,
    busy_between,
    busy_ratios,
    clock_start,
    metric,
    parse_prometheus,
    quantiles,
)
from summary import GOAL_CACHED_MS, GOAL_EVALS_PER_MIN, GOAL_GPU_BUSY, summary_md  # noqa: E402

SCHEMA = "kbench-serve-bench/1"
# GET /v1/submissions?ids= takes at most 256; fewer keep the URL short.
IDS_PER_GET = 64
SUBMIT_BATCH = 256  # SubmitRequest maxItems
# A request body is refused over 4 MiB and a source over 1 MiB (docs/serve.md): batches stay
# under this many bytes of JSON, and larger sources are left out, said, before sending.
MAX_BODY_BYTES = 3_500_000
MAX_SOURCE_BYTES = 1 << 20


# --- the tokens file ------------------------------------------------------------------------


def client_from_new_token(text):
    """(token, name, token_sha256) from what `kbench serve --new-token NAME` printed: the
    [[client]] entry's name and token_sha256, and the token, found as the word of the output
    whose sha256 is token_sha256 (so the layout of the rest of the output does not matter)."""
    import hashlib

    sha = re.search(r'token_sha256\s*=\s*"([0-9a-fA-F]{64})"', text)
    name = re.search(r'^\s*name\s*=\s*"([^"]*)"', text, re.M)
    if not sha:
        raise ValueError("no token_sha256 = \"<64 hex>\" in the --new-token output")
    want = sha.group(1).lower()
    for word in re.findall(r"[A-Za-z0-9_\-.~+/=:]+", text):
        for w in {word, word.split("=", 1)[-1], word.split(":", 1)[-1]}:
            if w and hashlib.sha256(w.encode()).hexdigest() == want:
                return w, name.group(1) if name else "bench", want
    raise ValueError("the --new-token output holds no word whose sha256 is its token_sha256")


def tokens_toml(name, token_sha256, per_minute=1_000_000, max_queued=1_000_000):
    """A tokens file of one client whose quotas stay out of the benchmark's way."""
    return (
        "[[client]]\n"
        f'name = "{name}"\n'
        f'token_sha256 = "{token_sha256}"\n'
        f"submissions_per_minute = {per_minute}\n"
        f"max_queued = {max_queued}\n"
    )


# --- HTTP -----------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status, body, what):
        self.status = status
        self.body = body
        try:
            err = json.loads(body)["error"]
            msg = f"{err.get('code')}: {err.get('message')}"
        except Exception:
            msg = body[:300]
        super().__init__(f"{what}: HTTP {status}: {msg}")


class Api:
    """The service's API over urllib (one connection a request). 429 and 503 are waited out
    for Retry-After seconds (1 if absent, at most 120) and retried, for at most `retry_s` in
    all per call; each wait is counted in `retries`."""

    def __init__(self, url, token, timeout_s=90.0, retry_s=900.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self.retries = {"429": 0, "503": 0, "waited_s": 0.0}
        self.lock = threading.Lock()

    def call(self, method, path, body=None, auth=True, timeout_s=None):
        """(status, headers, text); raises ApiError for any status other than 2xx."""
        data = None if body is None else json.dumps(body).encode()
        started = time.monotonic()
        while True:
            req = urllib.request.Request(self.url + path, data=data, method=method)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            if auth and self.token:
                req.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as r:
                    return r.status, dict(r.headers), r.read().decode("utf-8", "replace")
            except urllib.error.HTTPError as e:
                text = e.read().decode("utf-8", "replace")
                if e.code in (429, 503):
                    try:
                        wait = float(e.headers.get("Retry-After") or 1)
                    except ValueError:
                        wait = 1.0
                    wait = min(max(wait, 0.05), 120.0)
                    if time.monotonic() - started + wait > self.retry_s:
                        raise ApiError(e.code, text, f"{method} {path} (still refused after {self.retry_s:.0f} s of retries)")
                    with self.lock:
                        self.retries[str(e.code)] += 1
                        self.retries["waited_s"] += wait
                    time.sleep(wait)
                    continue
                raise ApiError(e.code, text, f"{method} {path}") from None

    def json(self, method, path, body=None, auth=True, timeout_s=None):
        _, _, text = self.call(method, path, body, auth, timeout_s)
        return json.loads(text)

    def health(self):
        return self.json("GET", "/v1/health", auth=False)

    def metrics(self):
        _, _, text = self.call("GET", "/metrics", auth=False, timeout_s=15)
        return parse_prometheus(text)

    def problems(self):
        return self.json("GET", "/v1/problems")["problems"]

    def submit(self, items):
        """Ids of `items` (NewSubmission dicts), in order, in batches of at most 256 and
        MAX_BODY_BYTES."""
        ids, batch, size = [], [], 0
        for it in items + [None]:
            n = 0 if it is None else len(json.dumps(it)) + 2
            if batch and (it is None or len(batch) == SUBMIT_BATCH or size + n > MAX_BODY_BYTES):
                got = self.json("POST", "/v1/submissions", {"submissions": batch})["ids"]
                if len(got) != len(batch):
                    raise ApiError(202, json.dumps({"ids": got}), f"POST /v1/submissions: {len(got)} ids for {len(batch)} kernels")
                ids += got
                batch, size = [], 0
            if it is not None:
                batch.append(it)
                size += n
        return ids

    def get_many(self, ids, wait_s):
        q = urllib.parse.urlencode({"ids": ",".join(ids), "wait": f"{wait_s:g}"})
        return self.json("GET", f"/v1/submissions?{q}", timeout_s=wait_s + 30)["submissions"]

    def get_one(self, sid, wait_s):
        q = urllib.parse.urlencode({"wait": f"{wait_s:g}"})
        return self.json("GET", f"/v1/submissions/{urllib.parse.quote(sid)}?{q}", timeout_s=wait_s + 30)


def problem_ids(problems):
    """(level, id) → the service's problem id, from /v1/problems: ids like `kernelbench/L1/19`
    (the suite's key), else the level field and the name's `<id>_` prefix."""
    out = {}
    for p in problems:
        m = re.search(r"L(\d+)/(\d+)$", p["id"])
        if m:
            out[(int(m.group(1)), int(m.group(2)))] = p["id"]
            continue
        m = re.match(r"(\d+)_", str(p.get("name", "")))
        if m:
            out[(int(p["level"]), int(m.group(1)))] = p["id"]
    return out


def wait_all(api, ids, deadline, poll_s=5.0, on_poll=None):
    """{id: submission} once every id is done or `deadline` (monotonic) passes; long-polls
    in groups of IDS_PER_GET with wait ≤ poll_s so that `on_poll(snapshot)` sees states."""
    latest, pending = {}, list(ids)
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        still = []
        for i in range(0, len(pending), IDS_PER_GET):
            group = pending[i : i + IDS_PER_GET]
            wait = max(0.0, min(poll_s, deadline - time.monotonic()))
            for s in api.get_many(group, wait):
                latest[s["id"]] = s
            still += [sid for sid in group if latest.get(sid, {}).get("state") != "done"]
        pending = still
        if on_poll:
            on_poll(latest)
    return latest


# --- steps ----------------------------------------------------------------------------------


def safe_metrics(api, log):
    """/metrics, or [] (said) when it cannot be read: the other figures still count."""
    try:
        return api.metrics()
    except Exception as e:
        log(f"/metrics not read: {e}")
        return []


def verdict_of(s):
    v = s.get("verdict") or {}
    return {
        "outcome": v.get("outcome"),
        "correct": v.get("correct"),
        "speedup": v.get("speedup"),
        "flagged": v.get("flagged"),
        # Why a kernel is not correct (the service's message): an honest candidate that
        # fails is a defect to chase, and the figures alone do not say which it was.
        "message": v.get("message"),
    }


def outcome_counts(subs):
    counts = {}
    for s in subs:
        o = (s.get("verdict") or {}).get("outcome") if s.get("state") == "done" else f"not done ({s.get('state')})"
        counts[o or "none"] = counts.get(o or "none", 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def record_phases(lines, since_unix_s):
    """The summed phases (seconds) of the records among `lines` (the export's signed record
    lines) that started at or after `since_unix_s`, how many there are, and how many opened
    their problem's reference session (`reference_open_s` above zero), how many were timed again
    (a note of the harness's clock retiming their claims: each such record's timing phase holds
    more than one timing) and the largest timing phase, so that a summed timing phase above an
    earlier run's tells retimes from slower timings."""
    phases, n, opened, retimed, timings = {}, 0, 0, 0, []
    for line in lines:
        line = line.strip()
        if not line:
            continue
        rec = json.loads(line)
        if (rec.get("started_unix_s") or 0) < since_unix_s:
            continue
        n += 1
        ph = rec.get("phases") or {}
        if (ph.get("reference_open_s") or 0) > 0:
            opened += 1
        if any(isinstance(x, str) and x.startswith("timed again") for x in rec.get("notes") or []):
            retimed += 1
        if isinstance(ph.get("timing_s"), (int, float)):
            timings.append(ph["timing_s"])
        for k, v in ph.items():
            if isinstance(v, (int, float)):
                phases[k] = phases.get(k, 0.0) + v
    return {
        "records": n,
        "opened_a_reference_session": opened,
        "timed_again": retimed,
        "timing_s_max": round(max(timings), 3) if timings else None,
        "phases_s": dict(sorted(((k, round(v, 3)) for k, v in phases.items()), key=lambda kv: -kv[1])),
    }


def export_phases(api, since_unix_s, log):
    """[`record_phases`] over the client's export (`GET /v1/export?format=jsonl`); a service
    without the export gives the reason instead. The export holds the client's ranked-pass
    records too; the bench submits nothing ranked, so its token's are the public pass's."""
    try:
        _, _, text = api.call("GET", "/v1/export?format=jsonl", timeout_s=120)
        return record_phases(text.splitlines(), since_unix_s)
    except (ApiError, urllib.error.URLError, OSError, ValueError) as e:
        log(f"throughput: no record phases from the export: {e}")
        return {"skipped": str(e)}


def step_throughput(api, args, pmap, log):
    cands = candidates.throughput_set(
        args.kernelbench, args.n, args.nonce, triton=not args.no_triton, only=args.only
    )
    known = [c for c in cands if (1, c["id"]) in pmap]
    missing = sorted({c["id"] for c in cands if (1, c["id"]) not in pmap})
    if missing:
        log(f"throughput: {len(cands) - len(known)} candidates skipped: the service has no L1 problem {missing}")
    if not known:
        raise SystemExit("throughput: the service has none of the candidates' problems (is it serving KernelBench level 1?)")
    items = [{"problem": pmap[(1, c["id"])], "source": c["source"], "label": c["label"]} for c in known]
    gpu = GpuSampler(args.gpus, args.gpu_interval_s).start()
    msampler = MetricsSampler(api, args.metrics_interval_s)
    m_before = safe_metrics(api, log)
    t_before = time.time()
    msampler.start()
    log(f"throughput: submitting {len(items)} candidates ({sum(c['kind'] == 'triton' for c in known)} Triton)")
    t0 = time.time()
    t0m = time.monotonic()
    ids = api.submit(items)
    t_acked = time.time()
    seen_queue_empty = [None]

    def on_poll(latest):
        done = sum(s.get("state") == "done" for s in latest.values())
        queued = sum(s.get("state") == "queued" for s in latest.values())
        if queued == 0 and seen_queue_empty[0] is None and latest:
            seen_queue_empty[0] = time.time()
        log(f"throughput: {done}/{len(ids)} done, {queued} queued, {time.time() - t0:.0f} s")

    latest = wait_all(api, ids, t0m + args.timeout_s, args.poll_s, on_poll)
    t_seen_done = time.time()
    msampler.stop()
    m_after = safe_metrics(api, log)
    t_after = time.time()
    # Two more reads while idle, to find when the service's busy clock started.
    time.sleep(args.idle_probe_s)
    m_idle = safe_metrics(api, log)
    t_idle = time.time()
    gpu.stop()
    subs = [latest.get(i, {"id": i, "state": "unknown"}) for i in ids]
    done = [s for s in subs if s.get("state") == "done"]
    fresh = [s for s in done if not s.get("cached")]
    res = {
        "submitted": len(ids),
        "done": len(done),
        "cached_among_them": len(done) - len(fresh),
        "by_kind": {},
        "outcomes": outcome_counts(subs),
        "client_first_submit_unix_s": t0,
        "client_submit_acked_unix_s": t_acked,
        "client_saw_all_done_unix_s": t_seen_done if len(done) == len(ids) else None,
    }
    for kind in ("pytorch", "triton"):
        ks = [s for s, c in zip(subs, known) if c["kind"] == kind]
        res["by_kind"][kind] = {"submitted": len(ks), "outcomes": outcome_counts(ks)}
    t_last = t_seen_done
    if done:
        first_sub = min(s["submitted_unix_s"] for s in subs if s.get("submitted_unix_s"))
        last_fin = max(s["finished_unix_s"] for s in done if s.get("finished_unix_s"))
        t_last = last_fin
        span = last_fin - first_sub
        res["span_s"] = span
        res["evaluations_per_min"] = len(fresh) / (span / 60.0) if span > 0 and fresh else None
        res["verdict_latency_s"] = quantiles(
            [s["finished_unix_s"] - s["submitted_unix_s"] for s in done if s.get("finished_unix_s")]
        )
        res["goal_evaluations_per_min"] = GOAL_EVALS_PER_MIN
        # None when nothing was evaluated (every verdict from the cache: a reused --nonce).
        res["goal_met"] = None if res["evaluations_per_min"] is None else res["evaluations_per_min"] >= GOAL_EVALS_PER_MIN
        res["complete"] = len(done) == len(ids)
    # GPU busy share while the queue is non-empty: from the first submit until the service's
    # queue depth first read 0 (else the client's first poll with none of its own queued).
    sampled_empty = msampler.queue_empty_at(t_acked)
    q_empty = (sampled_empty and sampled_empty[0]) or seen_queue_empty[0] or t_seen_done
    per_gpu, n = gpu.busy(t0, q_empty)
    per_gpu_all, n_all = gpu.busy(t0, t_last)
    before, after = busy_ratios(m_before), busy_ratios(m_after)
    busy = {
        "source": gpu.source,
        "window": {"from_unix_s": t0, "queue_empty_unix_s": q_empty, "seconds": q_empty - t0},
        "nvml_while_queued": per_gpu,
        "nvml_while_queued_mean": sum(per_gpu.values()) / len(per_gpu) if per_gpu else None,
        "nvml_samples": n,
        "nvml_to_last_verdict": per_gpu_all,
        "nvml_samples_to_last_verdict": n_all,
        "metrics_busy_ratio_before": before,
        "metrics_busy_ratio_after": after,
        "metrics_read_unix_s": [t_before, t_after],
        "metrics_samples": len(msampler.samples),
        "goal": GOAL_GPU_BUSY,
    }
    # The ratio is busy seconds over seconds since the service started: solved from two idle
    # reads when it moved between them (none running), else the start run.sh noted.
    idle = busy_ratios(m_idle)
    nothing_running = all(
        (metric(m, "kbench_serve_submissions", state="running") or 0) == 0 for m in (m_after, m_idle)
    )
    started = clock_start(after, idle, t_after, t_idle) if nothing_running else None
    busy["metrics_clock_start_unix_s"] = started
    busy["metrics_clock_start_from"] = "idle reads" if started else ("--service-started-unix-s" if args.service_started_unix_s else None)
    started = started or args.service_started_unix_s
    if started:
        busy["metrics_busy_between"] = busy_between(before, after, t_before, t_after, started)
        if sampled_empty and sampled_empty[1]:
            # From the read before the submit to the read that found the queue empty.
            busy["metrics_busy_while_queued"] = busy_between(before, sampled_empty[1], t_before, sampled_empty[0], started)
    nvml = [v for v in per_gpu.values() if v is not None]
    mb = [v for v in (busy.get("metrics_busy_while_queued") or busy.get("metrics_busy_between") or {}).values() if v is not None]
    busy["goal_basis"] = "nvml" if nvml else ("metrics" if mb else None)
    shares = nvml or mb
    busy["goal_met"] = (min(shares) > GOAL_GPU_BUSY) if shares else None
    evaluated = [(s, c) for s, c in zip(subs, known) if s.get("state") == "done"]
    details = [
        {
            "index": c["index"],
            "kind": c["kind"],
            "problem": s.get("problem"),
            "id": s["id"],
            "cached": s.get("cached"),
            "latency_s": (s["finished_unix_s"] - s["submitted_unix_s"]) if s.get("finished_unix_s") else None,
            **verdict_of(s),
        }
        for s, c in zip(subs, known)
    ]
    return res, busy, details, evaluated, m_after


def step_cached(api, args, evaluated, log):
    """Resubmit K evaluated sources one at a time: POST, then GET ?wait until done."""
    if not evaluated:
        return {"skipped": "no evaluated candidate to resubmit"}
    ms, post_ms, get_ms, not_cached, differs = [], [], [], 0, 0
    retries_before = dict(api.retries)
    deadline = time.monotonic() + args.timeout_s
    for k in range(args.cached):
        if time.monotonic() > deadline:
            log(f"cached: --timeout-s reached after {k}")
            break
        s0, c = evaluated[k % len(evaluated)]
        item = {"problem": s0["problem"], "source": c["source"], "label": f"{c['label']}-again-{k}"}
        t0 = time.perf_counter()
        sid = api.submit([item])[0]
        t1 = time.perf_counter()
        s = api.get_one(sid, 60)
        t2 = time.perf_counter()
        if s.get("state") != "done":
            s = api.get_one(sid, 60)
            t2 = time.perf_counter()
        post_ms.append((t1 - t0) * 1e3)
        get_ms.append((t2 - t1) * 1e3)
        if s.get("cached") and s.get("state") == "done":
            ms.append((t2 - t0) * 1e3)
            if verdict_of(s) != verdict_of(s0):
                differs += 1
        else:
            not_cached += 1
    p = quantiles(ms)
    retried = {k: api.retries[k] - retries_before.get(k, 0) for k in api.retries}
    return {
        "resubmitted": len(post_ms),
        "cached": len(ms),
        "not_cached": not_cached,
        "verdict_differs_from_first": differs,
        "submit_to_done_ms": p,
        "post_ms": quantiles(post_ms),
        "get_wait_ms": quantiles(get_ms),
        "retries_during": retried,
        "goal_ms": GOAL_CACHED_MS,
        "goal_met": (p.get("p99") is not None and p["p99"] < GOAL_CACHED_MS and not_cached == 0),
    }


def step_published(api, args, pmap, log):
    entries, notes = candidates.published_set(args.published)
    total = len(entries)
    big = [e for e in entries if len(e["source"].encode()) > MAX_SOURCE_BYTES]
    if big:
        notes.append(f"{len(big)} kernels over 1 MiB, not submitted: {[e['file'] for e in big][:5]}")
    entries = [e for e in entries if len(e["source"].encode()) <= MAX_SOURCE_BYTES]
    known = [e for e in entries if (e["level"], e["id"]) in pmap]
    skipped = len(entries) - len(known)
    if skipped:
        notes.append(f"{skipped} kernels of problems the service does not serve, not submitted")
    if not known:
        return {"dir": str(args.published), "kernels": total, "submitted": 0, "notes": notes}
    items = [
        {"problem": pmap[(e["level"], e["id"])], "source": e["source"], "label": e["label"][:128]}
        for e in known
    ]
    log(f"published: submitting {len(items)} kernels from {args.published}")
    t0 = time.monotonic()
    ids = api.submit(items)
    latest = wait_all(
        api, ids, t0 + args.timeout_s, args.poll_s,
        lambda l: log(f"published: {sum(s.get('state') == 'done' for s in l.values())}/{len(ids)} done"),
    )
    subs = [latest.get(i, {"id": i, "state": "unknown"}) for i in ids]
    done = [s for s in subs if s.get("state") == "done"]
    speedups = [s["verdict"]["speedup"] for s in done if (s.get("verdict") or {}).get("correct") and s["verdict"].get("speedup")]
    geo = None
    if speedups and all(x > 0 for x in speedups):
        import math

        geo = math.exp(sum(math.log(x) for x in speedups) / len(speedups))
    return {
        "dir": str(args.published),
        "kernels": total,
        "submitted": len(ids),
        "done": len(done),
        "cached": sum(bool(s.get("cached")) for s in done),
        "outcomes": outcome_counts(subs),
        "correct": sum(bool((s.get("verdict") or {}).get("correct")) for s in done),
        "flagged": sum(bool((s.get("verdict") or {}).get("flagged")) for s in done),
        "mean_speedup_correct": sum(speedups) / len(speedups) if speedups else None,
        "geomean_speedup_correct": geo,
        "seconds": time.monotonic() - t0,
        "notes": notes,
        "kernels_detail": [
            {"file": e["file"], "problem": s.get("problem"), "claimed_speedup": e["claimed_speedup"], **verdict_of(s)}
            for e, s in zip(known, subs)
        ],
    }


def gpu_name():
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        names = [n.strip() for n in out.stdout.splitlines() if n.strip()]
        return f"{len(names)} × {names[0]}" if names else None
    except Exception:
        return None


# --- main -----------------------------------------------------------------------------------


def parse_ids(spec):
    """`1-40,50` → {1..40, 50}."""
    out = set()
    for part in spec.split(","):
        part = part.strip()
        if "-" in part:
            a, b = part.split("-", 1)
            out.update(range(int(a), int(b) + 1))
        elif part:
            out.add(int(part))
    return out


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8470", help="the service (default %(default)s)")
    ap.add_argument("--token", help="a client token (else --token-file, else $KBENCH_SERVE_TOKEN)")
    ap.add_argument("--token-file", type=Path, help="a file holding the token")
    ap.add_argument("--kernelbench", type=Path, default=os.environ.get("KBENCH_KERNELBENCH_DIR"),
                    help="KernelBench checkout the candidates are made from (default $KBENCH_KERNELBENCH_DIR)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "serve-bench-out")))
    ap.add_argument("--steps", default="throughput,cached,published", help="comma-separated, in this order")
    ap.add_argument("-n", "--n", type=int, default=60, help="throughput: distinct candidates (default %(default)s)")
    ap.add_argument("--no-triton", action="store_true", help="throughput: PyTorch candidates only")
    ap.add_argument("--only", type=parse_ids, help="throughput: PyTorch candidates of these L1 ids only (e.g. 1-40,50)")
    ap.add_argument("-k", "--cached", type=int, default=200, help="cached: resubmissions (default %(default)s)")
    ap.add_argument("--published", type=Path, help="published: a kernel set (skipped without)")
    ap.add_argument("--nonce", default=None, help="written into every source (default: random); a nonce used before makes the throughput step answer from the cache")
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="longest wait for one step's verdicts (default %(default)s)")
    ap.add_argument("--poll-s", type=float, default=5.0, help="long-poll wait per request while waiting (default %(default)s)")
    ap.add_argument("--gpus", type=lambda s: s.split(","), help="GPU indices to sample (default all)")
    ap.add_argument("--gpu-interval-s", type=float, default=0.2)
    ap.add_argument("--metrics-interval-s", type=float, default=1.0)
    ap.add_argument("--service-started-unix-s", type=float, help="when the service started: turns the cumulative busy ratio into the run's share when two idle reads cannot tell")
    ap.add_argument("--idle-probe-s", type=float, default=3.0, help="seconds between the two idle reads of /metrics after the throughput step (default %(default)s)")
    ap.add_argument("--health-wait-s", type=float, default=60.0, help="wait this long for /v1/health first (default %(default)s)")
    ap.add_argument("--dry-run", action="store_true", help="write the candidates under --out/candidates and the plan; no HTTP")
    ap.add_argument("--self-test", action="store_true", help="check the candidates and the helpers; no service")
    ap.add_argument("--python", help="self-test: a Python with torch and triton to run the Triton candidates under Triton's interpreter (default $KBENCH_PYTHON when it has them)")
    ap.add_argument("--make-tokens", nargs=3, metavar=("NEW_TOKEN_OUTPUT", "TOKENS_TOML", "TOKEN_FILE"),
                    help="from `kbench serve --new-token` output: write a tokens file with quotas out of the way and the token")
    return ap


def main(argv=None):
    args = build_parser().parse_args(argv)
    if args.self_test:
        import selftest

        return selftest.run(args)
    if args.make_tokens:
        src, toml, tok = args.make_tokens
        token, name, sha = client_from_new_token(Path(src).read_text())
        Path(toml).write_text(tokens_toml(name, sha))
        Path(tok).write_text(token + "\n")
        os.chmod(tok, 0o600)
        print(f"tokens file {toml} (client {name!r}), token in {tok}")
        return 0
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = set(steps) - {"throughput", "cached", "published"}
    if unknown:
        raise SystemExit(f"--steps: unknown {sorted(unknown)}")
    if ("throughput" in steps or args.dry_run) and not args.kernelbench:
        raise SystemExit("--kernelbench DIR (or KBENCH_KERNELBENCH_DIR) is needed to make the candidates")
    args.nonce = args.nonce or secrets.token_hex(4)
    args.out.mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    if args.dry_run:
        cands = candidates.throughput_set(args.kernelbench, args.n, args.nonce, not args.no_triton, args.only)
        d = args.out / "candidates"
        d.mkdir(exist_ok=True)
        for c in cands:
            (d / f"{c['index']:04d}_{c['kind']}_L1_{c['id']}.py").write_text(c["source"])
        plan = {"nonce": args.nonce, "throughput": [{k: c[k] for k in ("index", "kind", "level", "id", "label")} for c in cands]}
        if args.published:
            entries, notes = candidates.published_set(args.published)
            plan["published"] = {"kernels": [{k: e[k] for k in ("level", "id", "file", "claimed_speedup")} for e in entries], "notes": notes}
        (args.out / "plan.json").write_text(json.dumps(plan, indent=1) + "\n")
        kinds = {k: sum(c["kind"] == k for c in cands) for k in ("pytorch", "triton")}
        log(f"dry run: {len(cands)} candidates ({kinds['pytorch']} PyTorch, {kinds['triton']} Triton) in {d}; "
            f"then {args.cached} cached resubmissions" + (f"; published: {len(plan['published']['kernels'])} kernels" if args.published else ""))
        return 0

    token = args.token or (args.token_file.read_text().strip() if args.token_file else os.environ.get("KBENCH_SERVE_TOKEN"))
    if not token:
        raise SystemExit("a token is needed: --token, --token-file or KBENCH_SERVE_TOKEN")
    api = Api(args.url, token)
    deadline = time.monotonic() + args.health_wait_s
    while True:
        try:
            health = api.health()
            break
        except (urllib.error.URLError, ConnectionError, ApiError, OSError) as e:
            if time.monotonic() > deadline:
                raise SystemExit(f"{args.url}/v1/health did not answer within {args.health_wait_s:.0f} s: {e}")
            time.sleep(0.5)
    log(f"service {args.url}: {health}")
    r = {
        "schema": SCHEMA,
        "started_unix_s": time.time(),
        "url": args.url,
        "service": health,
        "gpu_name": gpu_name(),
        "nonce": args.nonce,
        "settings": {k: (str(v) if isinstance(v, Path) else sorted(v) if isinstance(v, set) else v)
                     for k, v in vars(args).items() if k not in ("token", "make_tokens", "self_test", "python")},
        "errors": [],
    }
    out_json = args.out / "results.json"

    def save():
        r["retries"] = dict(api.retries)
        out_json.write_text(json.dumps(r, indent=1) + "\n")
        (args.out / "summary.md").write_text(summary_md(r))

    try:
        pmap = problem_ids(api.problems())
    except (ApiError, urllib.error.URLError, OSError, KeyError, ValueError) as e:
        raise SystemExit(f"GET /v1/problems: {e}")
    log(f"service has {len(pmap)} problems")
    evaluated = []
    for step in steps:
        try:
            if step == "throughput":
                res, busy, details, evaluated, m_after = step_throughput(api, args, pmap, log)
                r["throughput"], r["gpu_busy"] = res, busy
                r["throughput_candidates"] = details
                r["metrics_after_throughput"] = {
                    f"{n}{json.dumps(l, sort_keys=True) if l else ''}": v for n, l, v in m_after if n.startswith("kbench_serve_")
                }
                # Before the cached step: its answers are copies of these records.
                r["throughput_phases"] = export_phases(api, res["client_first_submit_unix_s"] - 1.0, log)
            elif step == "cached":
                if not evaluated:
                    r["cached"] = {"skipped": "needs the throughput step's evaluated sources"}
                else:
                    log(f"cached: {args.cached} resubmissions, one at a time")
                    r["cached"] = step_cached(api, args, evaluated, log)
            elif step == "published":
                if not args.published:
                    r["published"] = {"skipped": "no --published DIR"}
                else:
                    r["published"] = step_published(api, args, pmap, log)
        except (ApiError, urllib.error.URLError, OSError) as e:
            r["errors"].append(f"{step}: {e}")
            log(f"{step}: {e}")
        save()
    try:
        r["metrics_end"] = {f"{n}{json.dumps(l, sort_keys=True) if l else ''}": v for n, l, v in api.metrics() if n.startswith("kbench_serve_")}
    except Exception as e:
        r["errors"].append(f"metrics at the end: {e}")
    r["finished_unix_s"] = time.time()
    save()
    print((args.out / "summary.md").read_text())
    return 1 if r["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
