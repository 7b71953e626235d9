#!/usr/bin/env bash
# Single-node Slurm test of pipeline/slurm/annotate.sbatch and of an
# ablation grid submitted with pipeline/slurm/ablate-submit.sh.
#
# Starts a private Slurm cluster on this machine (munged, slurmctld and slurmd
# with their config, state, sockets and logs in a temporary directory, on free
# ports), submits the sbatch script as a 4-task job array over a small run,
# annotates a copy of the same run without sharding, and checks that both
# give the same state_values, action_values and failures: the same rows (per
# split: board ids; (board id, action) pairs) and, since the limit is a node
# count and every board starts a new game, the same values.
#
# Usage: tests/slurm/run.sh            (from the repository root)
#
# Environment:
#   CHESSBENCH_BIN   chessbench binary (default: ${CARGO_TARGET_DIR:-target}/
#                    release/chessbench, built with `cargo build --release`
#                    if missing or too old to have `annotate`)
#   ENGINE           Stockfish (default: stockfish on PATH, else
#                    /usr/games/stockfish)
#   REQUIRE_SLURM=1  fail instead of skipping when Slurm, munge or Stockfish
#                    is missing
#   KEEP_TMP=1       keep the temporary directory (logs, runs) for inspection
#
# Needs: slurmctld, slurmd, sbatch, squeue, sinfo, scontrol (Debian:
# slurm-wlm), munged and mungekey (munge), stockfish, python3 with duckdb
# (tests/slurm/compare.py compares the runs).
# Runs as root: slurmd must run as root to start jobs as their user, and
# SlurmUser=root keeps the setup free of a dedicated account. No cgroups are
# used (proctrack/linuxproc, task/none), so it also runs in a container
# without a writable cgroup hierarchy or systemd.

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

tasks=4
annotate_opts=(--nodes 300 --max-boards 512 --chunk-boards 64 -j 1)

HARNESS_NAME=slurm-test
# shellcheck source=tests/slurm/harness.sh
source tests/slurm/harness.sh
trap 'echo "error: line $LINENO: $BASH_COMMAND failed"' ERR

# --- Prerequisites ---------------------------------------------------------

path_with_sbin=$PATH:/usr/sbin:/sbin
for tool in slurmctld slurmd munged mungekey; do
    PATH=$path_with_sbin command -v "$tool" >/dev/null || skip "$tool not installed"
done
for tool in sbatch squeue sinfo scontrol python3; do
    command -v "$tool" >/dev/null || skip "$tool not installed"
done
python3 -c "import duckdb" 2>/dev/null || skip "the duckdb Python package is not installed (pip install duckdb)"
export PATH=$path_with_sbin
[[ $(id -u) == 0 ]] || skip "must run as root (slurmd starts jobs as their user)"

engine=${ENGINE:-$(command -v stockfish || echo /usr/games/stockfish)}
[[ -x $engine ]] || skip "stockfish not found (set ENGINE)"

bin=${CHESSBENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/chessbench}
if [[ -z ${CHESSBENCH_BIN:-} ]] && ! "$bin" annotate --help >/dev/null 2>&1; then
    log "building $bin"
    cargo build --release --locked
fi
"$bin" annotate --help >/dev/null 2>&1 || fail "$bin has no annotate command"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")

pgn=$(lichess_games)

# --- Temporary directory and cleanup ---------------------------------------

tmp=$(mktemp -d /tmp/chessbench-slurm.XXXXXX)
chmod 755 "$tmp" # munged refuses group/world-writable parents
pids=()
cleanup() {
    local status=$?
    local pid
    ((status == 0 || reported)) || echo "FAIL: unexpected error (exit status $status)"
    # Stop the daemons this script started, newest first, by pid.
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
    done
    if [[ ${KEEP_TMP:-0} == 1 || $status != 0 ]]; then
        echo "temporary directory kept: $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

started=$(date +%s)

# --- Input run --------------------------------------------------------------

log "ingesting $(basename "$pgn")"
"$bin" ingest --no-progress "$tmp/run-sharded" "$pgn" >"$tmp/ingest.log"
cp -a "$tmp/run-sharded" "$tmp/run-single"

# --- munge ------------------------------------------------------------------

mkdir -p "$tmp/munge"
chmod 700 "$tmp/munge"
mungekey --create --keyfile="$tmp/munge/munge.key" 2>/dev/null ||
    { dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none &&
        chmod 600 "$tmp/munge/munge.key"; }
munge_socket=$tmp/munge/munge.socket
munged --foreground --force \
    --socket="$munge_socket" \
    --key-file="$tmp/munge/munge.key" \
    --pid-file="$tmp/munge/munged.pid" \
    --log-file="$tmp/munge/munged.log" \
    --seed-file="$tmp/munge/munged.seed" \
    >"$tmp/munge/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 50); do
    [[ -S $munge_socket ]] && break
    sleep 0.1
done
[[ -S $munge_socket ]] || { cat "$tmp/munge/munged.out" "$tmp/munge/munged.log" 2>/dev/null; fail "munged did not start"; }

# --- Slurm ------------------------------------------------------------------

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
host=$(hostname -s)
cpus=$(nproc)
ctld_port=$(free_port)
slurmd_port=$(free_port)
while [[ $slurmd_port == "$ctld_port" ]]; do slurmd_port=$(free_port); done
mkdir -p "$tmp/slurm/state" "$tmp/slurm/spool" "$tmp/logs"
export SLURM_CONF=$tmp/slurm/slurm.conf
cat >"$SLURM_CONF" <<EOF
# Written by tests/slurm/run.sh: a one-node cluster for one test.
ClusterName=chessbench-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$munge_socket
CredType=cred/munge
StateSaveLocation=$tmp/slurm/state
SlurmdSpoolDir=$tmp/slurm/spool
SlurmctldPidFile=$tmp/slurm/slurmctld.pid
SlurmdPidFile=$tmp/slurm/slurmd.pid
SlurmctldLogFile=$tmp/slurm/slurmctld.log
SlurmdLogFile=$tmp/slurm/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
PlugStackConfig=$tmp/slurm/plugstack.conf
# No cgroups: works without systemd or a writable cgroup hierarchy.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# Keep finished jobs visible to scontrol (there is no accounting).
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
: >"$tmp/slurm/plugstack.conf"

log "starting slurmctld and slurmd (node $host, $cpus CPUs, ports $ctld_port/$slurmd_port)"
slurmctld -D -c -f "$SLURM_CONF" >"$tmp/slurm/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$host" >"$tmp/slurm/slurmd.out" 2>&1 &
pids+=($!)

dump_logs() {
    for f in "$tmp"/slurm/*.out "$tmp"/slurm/*.log; do
        [[ -s $f ]] && { echo "--- $f"; tail -n 30 "$f"; }
    done
}
state=
for _ in $(seq 120); do
    state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.5
done
[[ $state == idle ]] || { dump_logs; fail "node $host is not idle after 60 s (state: '${state:-none}')"; }
log "node $host is idle"

# --- Sharded annotation: the job array -------------------------------------

submit() {
    CHESSBENCH=$bin sbatch --parsable \
        --array="0-$((tasks - 1))" --cpus-per-task=1 --time=30 \
        --chdir="$tmp" --output="$tmp/logs/$1-%A_%a.out" \
        pipeline/slurm/annotate.sbatch "$tmp/run-sharded" \
        --engine "$engine" "${annotate_opts[@]}"
}

# Waits for array job $1 and checks that each task completed with status 0.
wait_array() {
    local job=$1 name=$2 t line
    for _ in $(seq 1200); do
        [[ -z $(squeue -h -j "$job" -o %i 2>/dev/null) ]] && break
        sleep 0.5
    done
    [[ -z $(squeue -h -j "$job" -o %i) ]] || { dump_logs; fail "$name: job $job still queued after 10 minutes"; }
    local bad=0
    for ((t = 0; t < tasks; t++)); do
        line=$(scontrol -o show job "${job}_$t" 2>/dev/null || true)
        if [[ $line != *"JobState=COMPLETED"* || $line != *"ExitCode=0:0"* ]]; then
            echo "$name: task $t: $(grep -o 'JobState=[^ ]*\|ExitCode=[^ ]*' <<<"$line" | tr '\n' ' ')"
            bad=1
        fi
        if ! grep -q "chessbench annotate exited with status 0" "$tmp/logs/$name-${job}_$t.out" 2>/dev/null; then
            echo "$name: task $t: no success line in its log"
            bad=1
        fi
    done
    if ((bad)); then
        for f in "$tmp/logs/$name-${job}"_*.out; do echo "--- $f"; tail -n 20 "$f"; done
        dump_logs
        fail "$name: job array $job did not succeed"
    fi
}

log "submitting a $tasks-task job array: annotate ${annotate_opts[*]}"
t0=$(date +%s)
job=$(submit array)
wait_array "$job" array
t_array=$(($(date +%s) - t0))
log "job array $job finished in ${t_array}s"
for ((t = 0; t < tasks; t++)); do
    grep -h '"shard"\|shard' "$tmp/logs/array-${job}_$t.out" | head -n 2 | sed "s/^/  task $t: /" || true
done

# Resubmitting resumes: everything is committed, so a second array must
# succeed without changing anything.
log "resubmitting the same array (must find every chunk committed)"
annotation_sums() {
    (cd "$1" && find . -type f \( -path './state_values/*' -o -path './action_values/*' \
        -o -path './failures/*' -o -path './annotate/*' \) | sort | xargs -r md5sum)
}
before=$(annotation_sums "$tmp/run-sharded")
t0=$(date +%s)
job2=$(submit resume)
wait_array "$job2" resume
t_resume=$(($(date +%s) - t0))
after=$(annotation_sums "$tmp/run-sharded")
[[ -n $before ]] || fail "no annotation files after the job array"
[[ $before == "$after" ]] || fail "resubmitting changed the run's annotation files"
log "resubmitted array $job2 finished in ${t_resume}s, files unchanged"

# --- Unsharded annotation of the copy --------------------------------------

log "annotating the copy without sharding"
t0=$(date +%s)
env -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_MIN -u SLURM_ARRAY_TASK_COUNT \
    -u JOB_COMPLETION_INDEX -u CHESSBENCH_SHARD_COUNT \
    "$bin" annotate "$tmp/run-single" --engine "$engine" "${annotate_opts[@]}" \
    --no-progress --json >"$tmp/logs/single.json"
t_single=$(($(date +%s) - t0))
log "unsharded annotation finished in ${t_single}s"

# --- Compare ------------------------------------------------------------------

log "comparing"
if ! python3 tests/slurm/compare.py annotate "$bin" "$tmp/run-sharded" "$tmp/run-single"; then
    fail "the job array's annotation differs from the unsharded run's"
fi

# --- An ablation grid: a data array, a train array, the report -------------

# Three variants on the unsharded run (whose annotation the grid's
# [annotate] table matches; it has a train split only, which they are also
# scored on): the base, a loss, and a node limit whose train split is
# annotated again by the data array before the train array starts.
grid=$tmp/grid.toml
cat >"$grid" <<EOF
[ablate]
seeds = [0]
[ablate.axes]
loss = ["l2"]
nodes = [100]
[annotate]
engine = "$engine"
nodes = 300
max_boards = 512
chunk_boards = 64
jobs = 1
[train]
eval_split = ""
buckets = 32
batch_size = 16
steps = 4
checkpoint_every = 2
eval_records = 64
[eval]
split = "train"
boards = 20
only = ["metrics"]
EOF
log "submitting an ablation grid: data array, train array, report"
t0=$(date +%s)
ids=$(cd "$tmp" && CHESSBENCH=$bin DATA_TASKS=2 DATA_CPUS=1 \
    "$repo/pipeline/slurm/ablate-submit.sh" "$grid" "$tmp/run-single" \
    --cpus-per-task=1 --time=30 --output="$tmp/logs/ablate-%A_%a.out")
log "submitted: $ids"
for _ in $(seq 1200); do
    [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
    sleep 0.5
done
if [[ -n $(squeue -h -o %i) ]]; then
    squeue
    for f in "$tmp"/ablate-*.out; do [[ -f $f ]] && { echo "--- $f"; tail -n 5 "$f"; }; done
    fail "ablation jobs still queued after 10 minutes"
fi
t_ablate=$(($(date +%s) - t0))
results=$tmp/run-single/ablate/grid/results
n=$(find "$results" -name '*.parquet' 2>/dev/null | wc -l)
if [[ $n != 3 || ! -s $tmp/run-single/ablate/grid/report.md ]]; then
    for f in "$tmp"/logs/ablate-*.out "$tmp"/ablate-*.out; do
        [[ -f $f ]] && { echo "--- $f"; tail -n 20 "$f"; }
    done
    dump_logs
    fail "the ablation grid wrote $n of 3 results files, or no report ($ids)"
fi
failed=$("$bin" sql "$tmp/run-single" --quiet --format csv \
    -e "SELECT count(*) AS n FROM ablations WHERE error IS NOT NULL" | tail -n 1)
[[ $failed == 0 ]] || fail "$failed ablation variants failed"
grep -q '## `nodes`' "$tmp/run-single/ablate/grid/report.md" || fail "the report has no nodes section"
log "ablation grid finished in ${t_ablate}s: 3 variants trained and scored, report written"

total=$(($(date +%s) - started))
echo
echo "PASS: $tasks-task Slurm job array == unsharded run; ablation grid as Slurm arrays" \
    "(array ${t_array}s, resubmit ${t_resume}s, unsharded ${t_single}s, ablation ${t_ablate}s, total ${total}s)"
