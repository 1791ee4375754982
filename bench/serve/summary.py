"""The serve benchmark's summary (`summary.md`): its figures against the goals, from the
results `serve_bench.py` gathered (Python 3 standard library only)."""

import re
import time

# The goals printed beside each figure (serve_bench.py judges each step against them).
GOAL_EVALS_PER_MIN = 30.0
GOAL_GPU_BUSY = 0.85
GOAL_CACHED_MS = 50.0


def fmt(x, digits=1, unit=""):
    return "—" if x is None else f"{x:.{digits}f}{unit}"


def met(flag):
    return {True: "met", False: "**missed**", None: "—"}[flag]


def failure_lines(candidates, width=300):
    """One line per finished candidate that is not correct: its problem, kind, outcome and
    the service's message (cut to `width` characters), in submission order."""
    return [
        f"- {c.get('problem')} ({c.get('kind')}, #{c.get('index')}): {c.get('outcome')}"
        + (": " + " ".join(str(c["message"]).split())[:width] if c.get("message") else "")
        for c in candidates
        if c.get("outcome") not in (None, "ok") and c.get("correct") is not True
    ]


def timing_ceiling(tp, gpus=1):
    """What the timing phases alone allow: a kernel is timed with its GPU to itself (nothing
    else of any evaluation runs on it meanwhile), so on `gpus` GPUs no scheduling can finish
    more than 60 × gpus × records / Σ timing_s evaluations a minute of these records' kind,
    whatever the rest of each evaluation costs. None without timed records."""
    n, t = tp.get("records") or 0, (tp.get("phases_s") or {}).get("timing_s") or 0.0
    if not n or t <= 0:
        return None
    return (
        f"Timing alone (the GPU held by one kernel's timing, {t / n:.2f} s an evaluation on average) "
        f"allows at most {60.0 * gpus * n / t:.1f} evaluations a minute on {gpus} GPU(s) for these records."
    )


def sessions_line(m):
    """The reference sessions the service opened and reused by the end of the throughput step
    (its `kbench_serve_reference_sessions_*_total` counters), or None when it has none."""
    counts = {}
    for k, v in m.items():
        got = re.match(r'kbench_serve_reference_sessions_(opened|reused)_total\{.*"pass": "([a-z]+)"', k)
        if got:
            counts.setdefault(got.group(2), {})[got.group(1)] = int(v)
    if not counts:
        return None
    return "Reference sessions after the throughput step: " + "; ".join(
        f"{p} pass {c.get('opened', 0)} opened, {c.get('reused', 0)} reused" for p, c in sorted(counts.items())
    ) + "."


def summary_md(r):
    lines = [f"# kbench serve bench, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(r['started_unix_s']))}", ""]
    h = r.get("service", {})
    lines += [f"Service {r['url']}: kbench {h.get('version', '?')}; nonce `{r['nonce']}`; "
              f"GPU {r.get('gpu_name') or 'not seen here (no nvidia-smi)'}.", ""]
    lines += ["| measure | value | goal | verdict |", "|---|---|---|---|"]
    t = r.get("throughput") or {}
    if t:
        lat = t.get("verdict_latency_s") or {}
        lines.append(
            f"| throughput, {t.get('done')}/{t.get('submitted')} done in {fmt(t.get('span_s'))} s"
            + (f" ({t['cached_among_them']} from the cache, not counted)" if t.get("cached_among_them") else "")
            + " | "
            f"{fmt(t.get('evaluations_per_min'))} evaluations/min | ≥ {GOAL_EVALS_PER_MIN:g} | {met(t.get('goal_met'))} |"
        )
        lines.append(
            f"| verdict latency (submit → done, all at once) | p50 {fmt(lat.get('p50'))} s, p90 {fmt(lat.get('p90'))} s, p99 {fmt(lat.get('p99'))} s | — | — |"
        )
    b = r.get("gpu_busy") or {}
    if b:
        nv = b.get("nvml_while_queued") or {}
        mb = b.get("metrics_busy_between") or {}
        mq = b.get("metrics_busy_while_queued") or {}
        lines.append(
            f"| GPU busy while queued ({b.get('source') or 'no sampler'}, {fmt((b.get('window') or {}).get('seconds'))} s) | "
            + (", ".join(f"GPU {g}: {v:.1%}" for g, v in nv.items()) or "not sampled")
            + f" | > {GOAL_GPU_BUSY:.0%} | {met(b.get('goal_met') if b.get('goal_basis') == 'nvml' else None)} |"
        )
        lines.append(
            "| `kbench_serve_gpu_busy_ratio` before → after | "
            + (", ".join(f"GPU {g}: {b['metrics_busy_ratio_before'].get(g, 0):.3f} → {v:.3f}" for g, v in b.get("metrics_busy_ratio_after", {}).items()) or "absent")
            + (("; share of the step: " + ", ".join(f"{v:.1%}" for v in mb.values() if v is not None)
                + (", while queued: " + ", ".join(f"{v:.1%}" for v in mq.values() if v is not None) if mq else "")
                + f" (clock start from {b.get('metrics_clock_start_from')})") if mb else "")
            + (f" | > {GOAL_GPU_BUSY:.0%} | {met(b.get('goal_met'))} |" if b.get("goal_basis") == "metrics" else " | — | — |")
        )
    c = r.get("cached") or {}
    if c and "skipped" not in c:
        p = c.get("submit_to_done_ms") or {}
        lines.append(
            f"| cached answer, {c.get('cached')}/{c.get('resubmitted')} from cache | p50 {fmt(p.get('p50'))} ms, p99 {fmt(p.get('p99'))} ms | p99 < {GOAL_CACHED_MS:g} ms | {met(c.get('goal_met'))} |"
        )
    pub = r.get("published") or {}
    if pub and pub.get("submitted"):
        lines.append(
            f"| published set, {pub.get('done')}/{pub.get('submitted')} done | {pub.get('correct')} correct, mean speedup {fmt(pub.get('mean_speedup_correct'), 2)} (geomean {fmt(pub.get('geomean_speedup_correct'), 2)}) | — | — |"
        )
    lines.append("")
    if t.get("outcomes"):
        lines.append("Throughput outcomes: " + ", ".join(f"{k} {v}" for k, v in t["outcomes"].items()) + ".")
        for kind, kv in (t.get("by_kind") or {}).items():
            if kv["submitted"]:
                lines.append(f"- {kind}: " + ", ".join(f"{k} {v}" for k, v in kv["outcomes"].items()))
        lines.append("")
    failed = failure_lines(r.get("throughput_candidates") or [])
    if failed:
        lines += ["Throughput candidates that finished not correct:", *failed, ""]
    if pub.get("outcomes"):
        lines.append("Published outcomes: " + ", ".join(f"{k} {v}" for k, v in pub["outcomes"].items()) + ".")
        lines.append("")
    sessions = sessions_line(r.get("metrics_after_throughput") or {})
    if sessions:
        lines += [sessions, ""]
    tp = r.get("throughput_phases") or {}
    if tp.get("records"):
        lines += [
            f"Record phases of the {tp['records']} evaluations (s, summed; from the export): "
            + ", ".join(f"{k} {v:.1f}" for k, v in tp["phases_s"].items() if v)
            + f". {tp['opened_a_reference_session']} opened their problem's reference session"
            + (
                f"; {tp['timed_again']} timed again by the harness's clock; the longest timing phase {tp['timing_s_max']:.2f} s"
                if tp.get("timing_s_max") is not None
                else ""
            )
            + ".",
            "",
        ]
        # The GPUs the service reported busy ratios for: the ones its evaluations could use.
        gpus = len((r.get("gpu_busy") or {}).get("metrics_busy_ratio_after") or {}) or 1
        ceiling = timing_ceiling(tp, gpus)
        if ceiling:
            lines += [ceiling, ""]
    m = r.get("metrics_end") or {}
    q = {}
    for kind in ("api", "verdict"):
        parts = []
        for k, v in m.items():
            got = re.match(rf'kbench_serve_{kind}_latency_seconds\{{.*"quantile": "([0-9.]+)"', k)
            if got:
                parts.append(f"p{float(got.group(1)) * 100:g} {v * 1e3:.1f} ms")
        q[kind] = ", ".join(parts)
    if any(q.values()):
        lines.append(f"The service's own quantiles at the end: API {q['api'] or '—'}; verdict {q['verdict'] or '—'}.")
        lines.append("")
    rt = r.get("retries") or {}
    lines.append(f"429 answers waited out: {rt.get('429', 0)}, 503: {rt.get('503', 0)} ({fmt(rt.get('waited_s'))} s).")
    for e in r.get("errors", []):
        lines.append(f"- error: {e}")
    return "\n".join(lines) + "\n"
