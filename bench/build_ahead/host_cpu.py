"""Where the host's CPU goes during a run: samples /proc every 0.25 s until SIGTERM or SIGINT,
then writes OUT (JSON):

- `stat`: [t_unix_s, total jiffies, idle jiffies] of /proc/stat's first line at each sample,
  so a summary can take the host's busy share over any window (summarize.py: between the
  first and the last verdict);
- `stages`: CPU seconds (user + system) of every process seen, summed by what it does in a
  build or a run (STAGES), each process's last sample counted, so up to 0.25 s of a process's
  last moments is missed, and one that lives less than a sample is not seen (`host_busy_cpu_s`,
  the host's busy CPU seconds while the sampler ran, is what the stages are a part of); a
  process older than the sampler counts from the sampler's start;
- `processes`: how many processes were seen.

A process's stage is decided when it is first seen, from its name (the kernel's `comm`: an
executable's or a script's file name) and its ancestors' names, read while they are alive: a
compiler under nvcc is nvcc's, one without is a C++ source's or the link's. A Python process
whose environment hides every GPU (`CUDA_VISIBLE_DEVICES=` empty) is a build job, as kbench
starts them on a GPU run (on a CPU run every worker hides the GPUs, so all count so); any
other Python process is a worker or kbench's own helper. Reading another user's environment
needs root (the GPU machines run as root); where it cannot be read the process counts apart.

Written here, not with psutil: the bench runs with Python's standard library only, on the
GPU machine as on CI. Usage: python3 host_cpu.py OUT.json [--interval S]
"""

import json
import os
import signal
import sys
import time

# Asked to stop (SIGTERM, SIGINT): the loop ends and the file is written. Installed first, so
# that a run ending while the sampler starts still gets its file.
_STOP = []
for _sig in (signal.SIGTERM, signal.SIGINT):
    signal.signal(_sig, lambda *_: _STOP.append(1))

HZ = os.sysconf("SC_CLK_TCK")
# nvcc's own tools, by name, and the host compilers and linkers that are nvcc's only under it
# (stage_of).
_NVCC_PARTS = {"cicc": "nvcc: cicc (device code)", "cudafe++": "nvcc: cudafe++",
               "ptxas": "nvcc: ptxas, fatbinary, nvlink", "fatbinary": "nvcc: ptxas, fatbinary, nvlink",
               "nvlink": "nvcc: ptxas, fatbinary, nvlink"}
_HOST_TOOLS = ("cc1plus", "cc1", "as", "ld", "collect2", "gcc", "g++", "c++", "cc", "ld.bfd", "ld.gold")
STAGES = (
    "nvcc: host compiler", "nvcc: cudafe++", "nvcc: cicc (device code)",
    "nvcc: ptxas, fatbinary, nvlink", "g++ and the link (C++ sources)", "python, no GPU visible (build jobs)",
    "python, other (workers, helpers)", "python, environment unreadable", "ninja", "kbench", "other",
)


def stage_of(comm, ancestors, environ):
    """The stage of a process named `comm` whose ancestors are named `ancestors` (nearest
    first) and whose environment is `environ` (bytes, None where unreadable)."""
    if comm in _NVCC_PARTS:
        return _NVCC_PARTS[comm]
    base = comm.split("-real")[0]
    # A versioned or target-named driver (`g++-12`, `x86_64-linux-gnu-g++-12`, cut to 15
    # characters in `comm`) is one too.
    if base in _HOST_TOOLS or comm.startswith(("cc1", "g++-", "gcc-", "x86_64-linux-gn", "aarch64-linux-g")):
        return "nvcc: host compiler" if "nvcc" in ancestors else "g++ and the link (C++ sources)"
    if comm == "nvcc":
        return "nvcc: host compiler"
    if comm.startswith("python"):
        if environ is None:
            return "python, environment unreadable"
        hidden = b"\0CUDA_VISIBLE_DEVICES=\0" in b"\0" + environ + b"\0"
        return "python, no GPU visible (build jobs)" if hidden else "python, other (workers, helpers)"
    if comm == "ninja":
        return "ninja"
    if comm == "kbench":
        return "kbench"
    return "other"


def _stat(pid):
    """(comm, ppid, cpu_s, start ticks) of a live process, None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    r = s.rfind(")")
    comm = s[s.find("(") + 1:r]
    f = s[r + 2:].split()
    return comm, int(f[1]), (int(f[11]) + int(f[12])) / HZ, int(f[19])


def _ancestors(ppid, depth=8):
    names = []
    while ppid > 1 and len(names) < depth:
        st = _stat(ppid)
        if st is None:
            break
        names.append(st[0])
        ppid = st[1]
    return names


def _environ(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


def _host_stat():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    return sum(v), v[3] + v[4]


def _classify(comm, ppid, pid):
    env = _environ(pid) if comm.startswith("python") else b""
    return stage_of(comm, _ancestors(ppid), env)


def sample(out, interval=0.25):
    me = os.getpid()
    # Processes older than the sampler (kernel threads, the shell) count only the CPU they use
    # from its start: their time before it is subtracted.
    with open("/proc/uptime") as f:
        began_ticks = float(f.read().split()[0]) * HZ
    seen = {}  # (pid, start) -> [stage, cpu_s, cpu_s before the sampler began, comm]
    stat = []
    while not _STOP:
        total, idle = _host_stat()
        stat.append([round(time.time(), 3), total, idle])
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            pid = int(entry.name)
            st = _stat(pid)
            if st is None:
                continue
            comm, ppid, cpu, start = st
            key = (pid, start)
            if key not in seen:
                seen[key] = [_classify(comm, ppid, pid), cpu, cpu if start < began_ticks else 0.0, comm]
            else:
                seen[key][1] = cpu
                if seen[key][3] != comm:
                    # Seen between its fork and its exec under its parent's name: named again
                    # by what it became (its CPU before the exec counts there too).
                    seen[key][0], seen[key][3] = _classify(comm, ppid, pid), comm
        time.sleep(interval)
    stages = {}
    for stage, cpu, before, _ in seen.values():
        stages[stage] = round(stages.get(stage, 0.0) + cpu - before, 3)
    # What the stages are a part of: the host's busy CPU seconds while the sampler ran. The
    # difference is processes that lived less than a sample and the last moments of the rest.
    busy_s = ((stat[-1][1] - stat[-1][2]) - (stat[0][1] - stat[0][2])) / HZ if len(stat) > 1 else None
    with open(out + ".partial", "w") as f:
        json.dump({"interval_s": interval, "stat": stat, "stages": stages, "processes": len(seen),
                   "host_busy_cpu_s": busy_s}, f)
    os.replace(out + ".partial", out)


def self_test():
    """stage_of() on the process trees of a CUDA build and of a run."""
    env_build = b"PATH=/usr/bin\0CUDA_VISIBLE_DEVICES=\0HOME=/tmp"
    env_worker = b"PATH=/usr/bin\0CUDA_VISIBLE_DEVICES=0\0"
    cases = [
        (("cicc", ["sh", "nvcc", "ninja", "python3"], b""), "nvcc: cicc (device code)"),
        (("cudafe++", ["sh", "nvcc"], b""), "nvcc: cudafe++"),
        (("cc1plus", ["gcc-real", "gcc", "sh", "nvcc", "ninja"], b""), "nvcc: host compiler"),
        (("cc1plus", ["g++-real", "c++", "ninja", "python3"], b""), "g++ and the link (C++ sources)"),
        (("ld", ["collect2", "g++", "ninja"], b""), "g++ and the link (C++ sources)"),
        (("python3", ["bwrap", "kbench"], env_build), "python, no GPU visible (build jobs)"),
        (("python3", ["bwrap", "kbench"], env_worker), "python, other (workers, helpers)"),
        (("python3", ["kbench"], None), "python, environment unreadable"),
        (("kbench", ["timeout", "bash"], b""), "kbench"),
        (("kworker/0:1", [], b""), "other"),
    ]
    for args, want in cases:
        got = stage_of(*args)
        assert got == want, (args, got, want)
        assert got in STAGES, got
    print("self-test: ok")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
    elif len(sys.argv) in (2, 4) and not sys.argv[1].startswith("-"):
        interval = float(sys.argv[3]) if len(sys.argv) == 4 and sys.argv[2] == "--interval" else 0.25
        sample(sys.argv[1], interval)
    else:
        sys.exit("usage: host_cpu.py OUT.json [--interval S] | --self-test")
