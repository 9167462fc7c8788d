#!/usr/bin/env bash
# A one-machine Slurm cluster for the tests: munged, slurmctld and slurmd on this host, with
# node slots to spare (config_overrides: the node says it has 8 CPUs whatever it has), its own
# configuration, spool and state under /tmp/dsm-slurm (the system's /etc/slurm is not touched).
# `stop` ends what `start` started (munged only if it was not running before) and removes the
# directory.
#
#   tests/slurm/cluster.sh start   prints `export SLURM_CONF=...` for the clients
#   tests/slurm/cluster.sh stop
#
# Needs root and Debian's slurm-wlm and munge packages (apt-get install slurm-wlm munge).
set -euo pipefail
dir=/tmp/dsm-slurm
conf=$dir/slurm.conf
host=$(hostname -s)

stop() {
    for p in slurmd slurmctld; do
        [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
    done
    # munged too, if this script started it (one already running is the system's).
    if [ -f "$dir/munged.ours" ]; then
        pkill -x -u munge munged 2>/dev/null || true
    fi
    sleep 0.5
    rm -rf "$dir"
}

case "${1:-}" in
start)
    command -v slurmctld >/dev/null && command -v munged >/dev/null || {
        echo "cluster.sh: needs slurm-wlm and munge (apt-get install slurm-wlm munge)" >&2
        exit 3
    }
    stop
    mkdir -p "$dir/state" "$dir/spool" /run/munge
    chown munge:munge /run/munge
    if ! pgrep -x munged >/dev/null; then
        runuser -u munge -- munged
        touch "$dir/munged.ours"
    fi
    cat >"$conf" <<CONF
ClusterName=dsmtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldPort=16817
SlurmdPort=16818
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=8 State=UNKNOWN
PartitionName=dsm Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
CONF
    slurmctld -f "$conf"
    slurmd -f "$conf"
    export SLURM_CONF=$conf
    for _ in $(seq 100); do
        if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
            echo "export SLURM_CONF=$conf"
            exit 0
        fi
        sleep 0.2
    done
    echo "cluster.sh: the node did not come up:" >&2
    sinfo >&2 || true
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2 || true
    exit 1
    ;;
stop) stop ;;
*) sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
