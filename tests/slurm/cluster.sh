#!/usr/bin/env bash
# A multi-node Slurm cluster on one machine, for tests: slurmctld and N
# slurmd nodes, each node in a network namespace (and a UTS namespace, so
# its own hostname) of its own, joined by a bridge inside a "switch"
# namespace that also holds the controller. Every address lives inside
# those namespaces (10.77.0.0/24); nothing touches the host's interfaces.
# The nodes share this machine's file system, as a cluster's nodes share a
# network file system: the run directory is one directory.
#
# Source it, then:
#   cluster_start DIR N      start munged, slurmctld and nodes n1..nN; DIR
#                            holds config, state, logs (it must exist);
#                            each node offers CB_CPUS CPUs (default: nproc)
#   cluster_run CMD...       run a client command (sbatch, squeue, ...)
#                            inside the switch namespace
#   cluster_kill_node I      SIGKILL node nI: its slurmd and every process
#                            in its namespaces (its jobs' too)
#   cluster_restart_node I   start node nI's slurmd again
#   cluster_stop             stop everything, remove the namespaces and
#                            the bridge (also on failure: call it from an
#                            EXIT trap)
#
# Standalone: `tests/slurm/cluster.sh selftest [N]` starts N nodes (3),
# checks each runs a job step under its own hostname and address, kills
# one, checks Slurm sees it down, restarts it, and tears down.
#
# Needs root (namespaces, slurmd), ip (iproute2), nsenter, unshare, slurmctld,
# slurmd, munged, mungekey, srun/sbatch/sinfo/scontrol (Debian: slurm-wlm,
# munge). No cgroups (proctrack/linuxproc, task/none).

CB_NET=10.77.0
CB_ID=cb$$
CB_SWITCH=$CB_ID-sw
CB_NODES=0
CB_PIDS=()
CB_DIR=

cb_log() { echo "[cluster $(date +%T)] $*"; }

# Runs "$@" in network namespace $1. nsenter, not `ip netns exec`, which
# remounts /sys for the namespace and so hides /sys/fs/cgroup, without
# which slurmd does not start.
cb_in_ns() {
    local ns=$1
    shift
    nsenter --net="/run/netns/$ns" "$@"
}

# Runs "$@" in node I's network namespace.
cb_in_node() {
    local i=$1
    shift
    cb_in_ns "$CB_ID-n$i" "$@"
}

cluster_run() { cb_in_ns "$CB_SWITCH" env SLURM_CONF="$CB_DIR/slurm.conf" "$@"; }

cluster_start() {
    CB_DIR=$1
    CB_NODES=$2
    local i
    export SLURM_CONF=$CB_DIR/slurm.conf
    mkdir -p "$CB_DIR/munge" "$CB_DIR/state" "$CB_DIR/logs"
    chmod 755 "$CB_DIR"
    chmod 700 "$CB_DIR/munge"

    # The switch namespace: a bridge with the controller's address.
    ip netns add "$CB_SWITCH"
    ip -n "$CB_SWITCH" link set lo up
    ip -n "$CB_SWITCH" link add br0 type bridge
    ip -n "$CB_SWITCH" addr add "$CB_NET.1/24" dev br0
    ip -n "$CB_SWITCH" link set br0 up
    for ((i = 1; i <= CB_NODES; i++)); do
        ip netns add "$CB_ID-n$i"
        ip -n "$CB_ID-n$i" link set lo up
        # A veth pair: eth0 in the node, its peer on the switch's bridge.
        ip -n "$CB_ID-n$i" link add eth0 type veth peer name "p$i" netns "$CB_SWITCH"
        ip -n "$CB_SWITCH" link set "p$i" master br0 up
        ip -n "$CB_ID-n$i" addr add "$CB_NET.$((10 + i))/24" dev eth0
        ip -n "$CB_ID-n$i" link set eth0 up
    done

    # munge: one key and one socket on the shared file system.
    mungekey --create --keyfile="$CB_DIR/munge/munge.key" 2>/dev/null ||
        { dd if=/dev/urandom of="$CB_DIR/munge/munge.key" bs=1024 count=1 status=none &&
            chmod 600 "$CB_DIR/munge/munge.key"; }
    munged --foreground --force --socket="$CB_DIR/munge/munge.socket" \
        --key-file="$CB_DIR/munge/munge.key" --pid-file="$CB_DIR/munge/munged.pid" \
        --log-file="$CB_DIR/munge/munged.log" --seed-file="$CB_DIR/munge/munged.seed" \
        >"$CB_DIR/munge/munged.out" 2>&1 &
    CB_PIDS+=($!)
    for _ in $(seq 50); do
        [[ -S $CB_DIR/munge/munge.socket ]] && break
        sleep 0.1
    done
    [[ -S $CB_DIR/munge/munge.socket ]] || { cb_log "munged did not start"; return 1; }

    local cpus=${CB_CPUS:-$(nproc)} nodes=""
    {
        echo "# Written by tests/slurm/cluster.sh: $CB_NODES nodes in network namespaces."
        echo "ClusterName=chessbench-cluster"
        echo "SlurmctldHost=switch($CB_NET.1)"
        echo "SlurmctldPort=6817"
        echo "SlurmdPort=6818"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/munge"
        # A requeued job waits cred_expire seconds before it starts again
        # (120 by default), so that its old credential cannot be replayed.
        echo "AuthInfo=socket=$CB_DIR/munge/munge.socket,cred_expire=10"
        echo "CredType=cred/munge"
        echo "StateSaveLocation=$CB_DIR/state"
        echo "SlurmdSpoolDir=$CB_DIR/spool-%n"
        echo "SlurmctldPidFile=$CB_DIR/slurmctld.pid"
        echo "SlurmdPidFile=$CB_DIR/slurmd-%n.pid"
        echo "SlurmctldLogFile=$CB_DIR/logs/slurmctld.log"
        echo "SlurmdLogFile=$CB_DIR/logs/slurmd-%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "MailProg=/bin/true"
        echo "PlugStackConfig=$CB_DIR/plugstack.conf"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobCompType=jobcomp/none"
        echo "SwitchType=switch/none"
        echo "MpiDefault=none"
        echo "SchedulerType=sched/backfill"
        # The main and backfill schedulers every 2 s (their defaults are 60
        # and 30): a task requeued from a dead node, which no event
        # schedules, starts within seconds instead of waiting for a pass.
        echo "SchedulerParameters=sched_interval=2,bf_interval=2"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        # A node that comes back is used again; a dead one is declared down
        # after SlurmdTimeout and its jobs requeued (JobRequeue).
        # CB_CPUS may exceed the hardware: the configuration is believed.
        echo "SlurmdParameters=config_overrides"
        echo "ReturnToService=2"
        echo "SlurmdTimeout=10"
        echo "MinJobAge=3600"
        echo "JobRequeue=1"
        for ((i = 1; i <= CB_NODES; i++)); do
            echo "NodeName=n$i NodeHostname=n$i NodeAddr=$CB_NET.$((10 + i)) CPUs=$cpus State=UNKNOWN"
            nodes+=${nodes:+,}n$i
        done
        echo "PartitionName=test Nodes=$nodes Default=YES MaxTime=INFINITE State=UP"
    } >"$SLURM_CONF"
    : >"$CB_DIR/plugstack.conf"

    cb_log "starting slurmctld ($CB_NET.1) and $CB_NODES nodes"
    # The controller's host name must be SlurmctldHost's: its own UTS
    # namespace says "switch".
    cb_in_ns "$CB_SWITCH" unshare --uts sh -c \
        "hostname switch && exec slurmctld -D -c -f '$SLURM_CONF'" \
        >"$CB_DIR/logs/slurmctld.out" 2>&1 &
    CB_PIDS+=($!)
    for ((i = 1; i <= CB_NODES; i++)); do
        cluster_restart_node "$i"
    done
    cb_wait_state idle "$(seq -s ' ' 1 "$CB_NODES")" 120 || return 1
    cb_log "nodes n1..n$CB_NODES idle"
}

# Starts node I's slurmd in its namespaces, with its own hostname.
cluster_restart_node() {
    local i=$1
    mkdir -p "$CB_DIR/spool-n$i"
    cb_in_node "$i" unshare --uts sh -c \
        "hostname n$i && exec slurmd -D -f '$SLURM_CONF' -N n$i" \
        >"$CB_DIR/logs/slurmd-n$i.out" 2>&1 &
}

# Kills node I: every process in its network namespace (slurmd, its job
# steps and their children), with SIGKILL, as a power failure would.
cluster_kill_node() {
    local i=$1 pids
    pids=$(ip netns pids "$CB_ID-n$i" 2>/dev/null | tr '\n' ' ')
    cb_log "killing node n$i (processes: ${pids:-none})"
    [[ -z $pids ]] || kill -9 $pids 2>/dev/null || true
    for _ in $(seq 50); do
        [[ -z $(ip netns pids "$CB_ID-n$i" 2>/dev/null) ]] && return 0
        sleep 0.1
    done
    return 1
}

# Waits until every node of the list "$2" (numbers) is in state $1 (sinfo's
# %T, e.g. idle, down), for at most $3 seconds.
cb_wait_state() {
    local want=$1 nodes=$2 secs=$3 i ok state
    for _ in $(seq $((secs * 2))); do
        ok=1
        for i in $nodes; do
            state=$(cluster_run sinfo -h -N -n "n$i" -o %T 2>/dev/null | head -1)
            # Without the flag sinfo appends (`*` not responding, `~`
            # powered off, ...).
            [[ ${state%%[^a-z]*} == "$want" ]] || ok=0
        done
        ((ok)) && return 0
        sleep 0.5
    done
    cb_log "nodes $nodes not $want after $secs s:"
    cluster_run sinfo -N 2>&1 | sed 's/^/  /'
    for f in "$CB_DIR"/logs/*; do
        [[ -s $f ]] && { echo "--- $f"; tail -n 15 "$f"; }
    done
    return 1
}

# Safe under `set -e` (a caller's EXIT trap): nothing here fails.
cluster_stop() {
    local i pid ns
    # Every process in the namespaces, then the daemons started here.
    for ns in $(ip netns list 2>/dev/null | awk -v id="$CB_ID-" 'index($1, id) == 1 {print $1}'); do
        pid=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        [[ -z $pid ]] || kill -9 $pid 2>/dev/null || true
    done
    for pid in "${CB_PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${CB_PIDS[@]}"; do
        for _ in $(seq 30); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    for ns in $(ip netns list 2>/dev/null | awk -v id="$CB_ID-" 'index($1, id) == 1 {print $1}'); do
        ip netns del "$ns" 2>/dev/null || true
    done
    CB_PIDS=()
    return 0
}

cb_selftest() {
    local n=${1:-3} i out
    # Global: the EXIT trap runs after this function's locals are gone.
    CB_SELFTEST_DIR=$(mktemp -d /tmp/chessbench-cluster.XXXXXX)
    local dir=$CB_SELFTEST_DIR
    trap 'cluster_stop; rm -rf "$CB_SELFTEST_DIR"' EXIT
    trap 'exit 130' INT TERM
    export PATH=$PATH:/usr/sbin:/sbin
    cluster_start "$dir" "$n" || exit 1
    for ((i = 1; i <= n; i++)); do
        out=$(cluster_run srun -w "n$i" -N1 sh -c 'echo $(hostname) $(ip -4 -o addr show eth0 | awk "{print \$4}")')
        [[ $out == "n$i $CB_NET.$((10 + i))/24" ]] || { echo "FAIL: node n$i ran as '$out'"; exit 1; }
        cb_log "n$i runs job steps as: $out"
    done
    cluster_kill_node 2 || { echo "FAIL: node n2's processes survived SIGKILL"; exit 1; }
    cb_wait_state down 2 60 || { echo "FAIL: Slurm did not mark the killed node down"; exit 1; }
    cb_log "n2 is down"
    cluster_restart_node 2
    cb_wait_state idle 2 60 || { echo "FAIL: n2 did not come back"; exit 1; }
    cb_log "n2 is back"
    cluster_stop
    [[ -z $(ip netns list | grep "^$CB_ID-") ]] || { echo "FAIL: namespaces left"; exit 1; }
    echo "cluster selftest: OK ($n nodes)"
}

if [[ ${BASH_SOURCE[0]} == "$0" && ${1:-} == selftest ]]; then
    cb_selftest "${2:-3}"
fi
