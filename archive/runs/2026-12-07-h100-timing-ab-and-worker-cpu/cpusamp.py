"""Sample every process's CPU seconds (utime+stime) every 0.25 s until killed or the file
STOP exists; write per-process totals, lifetimes and command lines as JSON lines, plus a
per-second timeline of CPU seconds by group (harness, worker, build, other)."""
import json, os, sys, time, signal
out = sys.argv[1]
tick = os.sysconf("SC_CLK_TCK")
procs = {}  # pid -> dict
timeline = []
def group(cmd):
    if "kbench-" in cmd.split(" ")[0] or cmd.startswith("/tmp/d/kbench"):
        return "harness"
    if "kbench_worker" in cmd:
        return cmd.split(" ")[0].strip("[]")
    for c in ("nvcc", "cicc", "cudafe", "ptxas", "gcc", "g++", "cc1", "ninja", "as ", "ld"):
        if c in cmd.split(" ")[0]:
            return "compile"
    return "other"
stop = False
def on(*_):
    global stop; stop = True
signal.signal(signal.SIGTERM, on)
t0 = time.time(); last = {}
while not stop:
    now = time.time(); bygroup = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
            rest = s[s.rfind(")") + 2:].split()
            cpu = (int(rest[11]) + int(rest[12])) / tick
            start = int(rest[19])
            key = (int(p), start)
            d = procs.get(key)
            if d is None:
                try:
                    cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:300]
                except OSError:
                    cmd = ""
                uid = -1; nogpu = False
                try:
                    for l in open(f"/proc/{p}/status"):
                        if l.startswith("Uid:"):
                            uid = int(l.split()[1]); break
                    nogpu = b"CUDA_VISIBLE_DEVICES=\0" in open(f"/proc/{p}/environ", "rb").read()
                except (OSError, ValueError):
                    pass
                if "kbench_worker" in cmd:
                    cmd = ("[build] " if nogpu else "[cand] " if uid == 65534 else "[ref] ") + cmd
                d = procs[key] = {"pid": int(p), "uid": uid, "cmd": cmd, "first": now - t0, "cpu0": cpu, "cpu": cpu}
            dc = cpu - d["cpu"]
            d["cpu"] = cpu; d["last"] = now - t0
            g = group(d["cmd"])
            bygroup[g] = bygroup.get(g, 0) + dc
        except (OSError, ValueError, IndexError):
            continue
    timeline.append({"t": round(now - t0, 2), **{k: round(v, 3) for k, v in bygroup.items()}})
    time.sleep(0.25)
with open(out, "w") as f:
    for d in procs.values():
        if d["cpu"] - d["cpu0"] > 0.05:
            d["grp"] = group(d["cmd"]); f.write(json.dumps(d) + "\n")
with open(out + ".timeline", "w") as f:
    for r in timeline:
        f.write(json.dumps(r) + "\n")
