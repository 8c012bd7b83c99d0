#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the `slurm` tests and for trying docs/cluster.md without a cluster.
#
#   scripts/local_slurm.sh install   apt-get install slurm-wlm munge where absent (root; Debian/Ubuntu)
#   scripts/local_slurm.sh start     write slurm.conf for this host, start munged, slurmctld and slurmd, wait until
#                                    `sinfo` shows the node idle; prints the SLURM_CONF line to export
#   scripts/local_slurm.sh status    sinfo + squeue (exit 1 when the cluster is not up)
#   scripts/local_slurm.sh stop      stop the three daemons (queued and running jobs are lost)
#   scripts/local_slurm.sh env       print `export SLURM_CONF=...` (eval "$(scripts/local_slurm.sh env)")
#
# Everything lives in $ARCHLAB_SLURM_DIR (default /tmp/archlab-slurm-$UID): slurm.conf, its own munge key and
# socket, state, spool, logs. Nothing under /etc is written, so a real SLURM install on the machine is left as it
# is; every client command (sbatch, squeue, scancel, sinfo) finds this cluster through SLURM_CONF. Ports: 16817
# (slurmctld) and 16818 (slurmd), or ARCHLAB_SLURM_PORT and ARCHLAB_SLURM_PORT+1.
#
# The cluster: one node (this host, all its CPUs and 90% of its memory), one partition `debug` (default, no time
# limit), jobs run as the submitting user; proctrack/linuxproc and task/none, so no cgroup setup is needed (works in
# containers); no accounting database (sacct has nothing; the launcher reads squeue). Requeue is allowed (JobRequeue=1),
# and a requeued job may start again after 5 s (cred_expire=5, the least SLURM accepts; 120 s by default). The scheduler starts a
# submitted job at once (batch_sched_delay=0; 3 s by default) and looks at pending jobs every second (sched_interval=1;
# 60 s by default), so a requeued job restarts ~6 s after its requeue, not 20-30 s.
# Not handled: several nodes (Debian's slurmd is built without --enable-multiple-slurmd), GPUs (no gres.conf).
set -euo pipefail

DIR="${ARCHLAB_SLURM_DIR:-/tmp/archlab-slurm-$(id -u)}"
PORT="${ARCHLAB_SLURM_PORT:-16817}"
CONF="$DIR/slurm.conf"
SOCKET="$DIR/munge/munge.socket"
export SLURM_CONF="$CONF"

die() { echo "local_slurm: $*" >&2; exit 1; }

have_slurm() { command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v munged >/dev/null 2>&1; }

install() {
    if have_slurm; then echo "local_slurm: slurm-wlm and munge are installed"; return; fi
    [ "$(id -u)" = 0 ] || die "slurm-wlm / munge not installed and not root: sudo apt-get install slurm-wlm munge"
    command -v apt-get >/dev/null 2>&1 || die "slurm-wlm / munge not installed and no apt-get here"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null) \
        || die "apt-get install slurm-wlm munge failed"
    echo "local_slurm: installed slurm-wlm and munge"
}

write_conf() {
    local host cpus mem_mb user
    host="$(hostname -s)"
    cpus="$(nproc --all)"
    mem_mb="$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)"
    user="$(id -un)"
    mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log" "$DIR/munge"
    chmod 700 "$DIR/munge"
    cat > "$CONF" <<EOF
# written by scripts/local_slurm.sh: a one-node cluster on $host
ClusterName=archlab
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SOCKET,cred_expire=5
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=1
MpiDefault=none
JobRequeue=1
ReturnToService=2
KillWait=30
MinJobAge=300
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    have_slurm || die "slurm-wlm / munge not installed: scripts/local_slurm.sh install (as root)"
    [ "$(id -u)" = 0 ] || die "start needs root (slurmd runs jobs as their user)"
    write_conf
    if ! running "$DIR/munge/munged.pid"; then
        [ -f "$DIR/munge/munge.key" ] || { dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 2>/dev/null; chmod 400 "$DIR/munge/munge.key"; }
        munged --force --socket="$SOCKET" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/munge/munged.pid" \
            --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
            || die "munged did not start: see $DIR/log/munged.log"
    fi
    running "$DIR/slurmctld.pid" || slurmctld -f "$CONF" || die "slurmctld did not start: see $DIR/log/slurmctld.log"
    running "$DIR/slurmd.pid" || slurmd -f "$CONF" -N "$(hostname -s)" || die "slurmd did not start: see $DIR/log/slurmd.log"
    local i state=""
    for i in $(seq 1 60); do
        state="$(sinfo -h -o %T 2>/dev/null | head -1 || true)"
        case "$state" in
            idle|mixed|allocated) echo "local_slurm: up ($state) in ${i}x0.5 s; export SLURM_CONF=$CONF"; return ;;
            *drain*|down*) scontrol update nodename="$(hostname -s)" state=resume >/dev/null 2>&1 || true ;;
        esac
        sleep 0.5
    done
    die "the node did not become idle in 30 s (sinfo: '${state:-no answer}'); see $DIR/log/"
}

stop() {
    local f
    for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
        if running "$f"; then kill "$(cat "$f")" 2>/dev/null || true; fi
    done
    for f in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
        for _ in $(seq 1 40); do running "$f" || break; sleep 0.25; done
    done
    echo "local_slurm: stopped"
}

status() {
    [ -f "$CONF" ] || die "not started (no $CONF)"
    sinfo && squeue
}

case "${1:-}" in
    install) install ;;
    start) start ;;
    stop) stop ;;
    status) status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    *) echo "usage: scripts/local_slurm.sh install|start|stop|status|env" >&2; exit 2 ;;
esac
