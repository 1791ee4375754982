"""Samples /proc every 0.25 s until killed (SIGTERM): per process, the last utime+stime seen,
its comm, ppid and cmdline head; on exit writes a table of CPU seconds per comm and per
(comm, parent comm) to argv[1]."""
import os, signal, sys, time, collections, json
HZ = os.sysconf("SC_CLK_TCK")
seen = {}  # pid -> [comm, ppid, cpu_s, cmd, start]
stop = False
def term(*_):
    global stop; stop = True
signal.signal(signal.SIGTERM, term); signal.signal(signal.SIGINT, term)
me = os.getpid()
while not stop:
    for e in os.scandir("/proc"):
        if not e.name.isdigit(): continue
        pid = int(e.name)
        if pid == me: continue
        try:
            with open(f"/proc/{pid}/stat") as f: s = f.read()
        except OSError: continue
        r = s.rfind(")"); comm = s[s.find("(")+1:r]; fl = s[r+2:].split()
        cpu = (int(fl[11]) + int(fl[12])) / HZ; ppid = int(fl[1]); start = int(fl[19])
        k = (pid, start)
        if k not in seen:
            try: cmd = open(f"/proc/{pid}/cmdline","rb").read()[:300].replace(b"\0", b" ").decode(errors="replace")
            except OSError: cmd = ""
            seen[k] = [comm, ppid, cpu, cmd]
        else: seen[k][2] = cpu; seen[k][0] = comm
    time.sleep(0.25)
comm_of = {k[0]: v[0] for k, v in seen.items()}
by = collections.Counter(); byp = collections.Counter(); n = collections.Counter()
for k, (comm, ppid, cpu, cmd) in seen.items():
    role = comm
    if comm.startswith("python"):
        for tag in ("build", "serve", "prestart", "reference", "candidate"):
            if tag in cmd: role = f"{comm}[{tag}]"; break
    by[role] += cpu; n[role] += 1; byp[(role, comm_of.get(ppid, "?"))] += cpu
with open(sys.argv[1], "w") as f:
    tot = sum(by.values()); f.write(f"total {tot:.1f} cpu-s over {len(seen)} processes\n")
    for c, v in by.most_common(40): f.write(f"{c:40s} {v:9.1f} s  {n[c]:6d} procs\n")
    f.write("\nby (comm, parent comm)\n")
    for (c, p), v in byp.most_common(40): f.write(f"{c:30s} <- {p:20s} {v:9.1f}\n")
    f.write("\nsample cmdlines\n")
    shown=set()
    for k,(comm,ppid,cpu,cmd) in seen.items():
        if comm.startswith("python") and cmd[:60] not in shown and len(shown)<15:
            shown.add(cmd[:60]); f.write(f"{comm} {cpu:.1f} {cmd[:200]}\n")
