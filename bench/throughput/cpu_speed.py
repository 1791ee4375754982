"""The host's single-core speed now: a pure-Python loop pinned to one core at a time (the
first and the last allowed core: the harness keeps the highest-numbered ones for timing),
the median of three short rounds each, in loop iterations per second. run.sh records it
before and after every run (`<run>.cpu_speed`), so that two runs compared with each other
(1 GPU against 2) can be checked for having had the same machine speed: on a virtual host
the same loop ran 1.5x faster on one vCPU than on another within a minute, and the problems of a
1-GPU run's second call ran 7-14% slower than its first call's had against the same 2-GPU run
(archive/runs/2026-11-28-h200x2-half-b).

    python3 bench/throughput/cpu_speed.py   # prints {"cores": {"0": 2885.0, "31": 1906.3}}
"""

import json
import os
import statistics
import time

ROUND_S = 0.3


def spin_once():
    """One unit of the loop both this script and probe_contention.py count (so that their
    iterations per second are one unit and can be compared)."""
    s = 0
    for i in range(10000):
        s += i
    return s


def rate_on(core):
    os.sched_setaffinity(0, {core})
    rates = []
    for _ in range(3):
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < ROUND_S:
            spin_once()
            n += 1
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def main():
    allowed = sorted(os.sched_getaffinity(0))
    cores = sorted({allowed[0], allowed[-1]})
    try:
        out = {str(c): round(rate_on(c), 1) for c in cores}
    finally:
        os.sched_setaffinity(0, set(allowed))
    print(json.dumps({"cores": out}))


if __name__ == "__main__":
    main()
