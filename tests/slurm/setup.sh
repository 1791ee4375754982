#!/usr/bin/env bash
# A single-node Slurm cluster for kbench's tests (CPU only), on Debian: installs slurm and
# munge when missing, writes slurm.conf for this host, starts munged, slurmctld and slurmd,
# and waits until `sinfo` shows the node idle. Idempotent: a cluster already up with this
# configuration is left as it is; otherwise the daemons are (re)started.
# Needs root. Not for production clusters: SlurmUser=root and no accounting database.
set -euo pipefail

say() { echo "slurm setup: $*" >&2; }

if [[ $(id -u) -ne 0 ]]; then
    say "must run as root (it installs packages and starts daemons)"
    exit 1
fi

host=$(hostname -s)
conf=/etc/slurm/slurm.conf

node_state() { sinfo -h -n "$host" -o %t 2>/dev/null | head -n1 || true; }

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    say "installing slurmctld, slurmd, slurm-client and munge"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi

# slurm.conf for this one node, CPU only. Addresses are given, so no name lookup of the
# host is needed. Cores are the consumable resource, so array tasks share the node one
# core each.
wanted=$(cat <<CONF
# kbench test cluster (tests/slurm/setup.sh): one node, CPU only
ClusterName=kbench-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# Finished jobs stay visible to squeue for a while (there is no accounting here).
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
)

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

if [[ -f $conf && "$(cat "$conf")" == "$wanted" ]] && munge_ok && [[ $(node_state) == idle* ]]; then
    say "cluster already up: $(sinfo -h -o '%P %D %t %C' | head -n1)"
    exit 0
fi

# munge: a key (the package normally makes one) and a running daemon.
if [[ ! -s /etc/munge/munge.key ]]; then
    say "creating a munge key"
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge_ok; then
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
    munge_ok || { say "munged does not answer; see /var/log/munge/munged.log"; exit 1; }
fi

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
printf '%s\n' "$wanted" >"$conf"

# (Re)start the daemons with this configuration.
for d in slurmd slurmctld; do
    pidfile=/run/$d.pid
    if [[ -s $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        pid=$(cat "$pidfile")
        say "stopping the running $d ($pid)"
        kill "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
done
# -c: start with no saved state. A session that ended while a test's job ran leaves that job
# in StateSaveLocation; slurmctld would recover it as still running and the node would stay
# 'mix' (allocated) until the job's time limit, which is how CI once failed here.
say "starting slurmctld (state cleared) and slurmd on $host ($(nproc) CPUs)"
/usr/sbin/slurmctld -c
/usr/sbin/slurmd

state=
for _ in $(seq 120); do
    state=$(node_state)
    case $state in
        idle*) say "cluster up: $(sinfo -h -o '%P %D %t %C' | head -n1)"; exit 0 ;;
        down* | drain* | fail*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
        # Jobs of an earlier life of this cluster (slurmctld -c drops them; a job slurmd
        # still runs reports back): none of them belongs to a test that runs now.
        mix* | alloc*) scancel --full --quiet --user=root >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
done
say "node $host is not idle after 60 s (state: ${state:-none}); see /var/log/slurm/slurmctld.log and slurmd.log"
tail -n 20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
exit 1
