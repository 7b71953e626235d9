#!/usr/bin/env bash
# Fault tests of the cluster path: pipeline/slurm/annotate.sbatch and
# pipeline/slurm/ablate-submit.sh on a three-node Slurm cluster on this
# machine (tests/slurm/cluster.sh: each node in a network namespace of its
# own, the run directory shared as on a network file system), against one
# unsharded process on a copy of the same boards. Each case ends with the
# reference's tables (tests/slurm/compare.py) and prints what was retried:
#
#   node     a node is killed mid-array (its slurmd and every process of its
#            jobs, SIGKILL); Slurm requeues its tasks on the other nodes
#   commit   tasks killed after writing a chunk's files and before its
#            entry, then after the entry and before the renames, then
#            between two renames (CHESSBENCH_FAILPOINT); each time the
#            array is resubmitted as docs/annotate.md says
#   twice    the same array submitted twice at once, and an array of
#            another size beside them: the second process of a shard, and
#            every process of another shard count, refuses, clearly
#   engine   the engine dies on one board, on every try
#            (tests/slurm/crashing-engine.py): that board is reported as
#            failed, the rest of the shard completes, and a resubmission
#            annotates it
#   ablate   an ablation grid (data array, train array, report) with the
#            node of a training variant killed: the report completes after
#            the requeue and equals the grid run by one process
#
# Usage: tests/slurm/faults.sh [CASE...]    (all cases by default)
#
# Environment: CHESSBENCH_BIN (default ${CARGO_TARGET_DIR:-target}/debug/
# chessbench), ENGINE, REQUIRE_SLURM=1 (fail instead of skipping when
# something is missing), KEEP_TMP=1 (keep the temporary directory).
# Needs root, and what tests/slurm/cluster.sh and tests/slurm/run.sh need.

set -Eeuo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
# shellcheck source=tests/slurm/cluster.sh
source tests/slurm/cluster.sh

cases=("$@")
((${#cases[@]})) || cases=(node commit twice engine ablate)
nodes=3
# Four CPUs a node on any machine: the arrays' tasks all run at once, as on
# a real cluster (the tasks are light; the machine is oversubscribed).
export CB_CPUS=4
# Small enough to be quick, large enough that every shard has chunks: 384
# boards in 12 chunks; a node limit, so values do not depend on timing.
annotate_opts=(--nodes 200 --max-boards 384 --chunk-boards 32 -j 1)

HARNESS_NAME=faults
# shellcheck source=tests/slurm/harness.sh
source tests/slurm/harness.sh

# --- Prerequisites ---------------------------------------------------------

export PATH=$PATH:/usr/sbin:/sbin
[[ $(id -u) == 0 ]] || skip "must run as root (network namespaces; slurmd starts jobs as their user)"
for tool in slurmctld slurmd munged mungekey sbatch squeue sinfo scontrol ip nsenter unshare python3; do
    command -v "$tool" >/dev/null || skip "$tool not installed"
done
python3 -c "import duckdb" 2>/dev/null || skip "the duckdb Python package is not installed"
ip netns add "$CB_ID-probe" 2>/dev/null || skip "cannot create network namespaces here"
ip netns del "$CB_ID-probe"
engine=${ENGINE:-$(command -v stockfish || echo /usr/games/stockfish)}
[[ -x $engine ]] || skip "stockfish not found (set ENGINE)"
bin=${CHESSBENCH_BIN:-${CARGO_TARGET_DIR:-target}/debug/chessbench}
"$bin" annotate --help >/dev/null 2>&1 || fail "$bin is not a chessbench binary (set CHESSBENCH_BIN)"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
pgn=$(lichess_games)

# --- Temporary directory, cleanup ------------------------------------------

tmp=$(mktemp -d /tmp/chessbench-faults.XXXXXX)
chmod 755 "$tmp"
mkdir -p "$tmp/cluster" "$tmp/logs"
cleanup() {
    local status=$?
    ((status == 0 || reported)) || echo "FAIL: unexpected error (exit status $status) at line ${BASH_LINENO[0]}"
    cluster_stop
    if [[ ${KEEP_TMP:-0} == 1 || $status != 0 ]]; then
        echo "temporary directory kept: $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'echo "error: line $LINENO: $BASH_COMMAND failed"' ERR
trap 'exit 130' INT TERM
started=$(date +%s)
summary=()

# --- The boards, and their unsharded annotation ----------------------------

log "ingesting $(basename "$pgn"); annotating a copy in one process (the reference)"
"$bin" ingest --no-progress "$tmp/base" "$pgn" >"$tmp/logs/ingest.log"
cp -a "$tmp/base" "$tmp/reference"
t0=$(date +%s)
"$bin" annotate "$tmp/reference" --engine "$engine" "${annotate_opts[@]}" --no-progress \
    >"$tmp/logs/reference.log"
log "reference annotated in $(($(date +%s) - t0)) s: $(head -n 1 "$tmp/logs/reference.log")"

cluster_start "$tmp/cluster" "$nodes" || fail "the cluster did not start"

# --- Helpers ------------------------------------------------------------------

# Submits the annotate array NAME over run RUN with TASKS tasks; extra
# sbatch options and annotate options after them. Prints the job id.
submit() {
    local name=$1 run=$2 tasks=$3
    shift 3
    CHESSBENCH=$bin cluster_run sbatch --parsable --array="0-$((tasks - 1))" \
        --cpus-per-task=1 --time=20 --chdir="$tmp" --output="$tmp/logs/$name-%A_%a.out" \
        pipeline/slurm/annotate.sbatch "$run" --engine "${ENGINE_UNDER_TEST:-$engine}" \
        "${annotate_opts[@]}" "$@"
}

# Waits until none of the jobs "$@" is queued or running (at most 5 min).
wait_jobs() {
    local j pending
    for _ in $(seq 600); do
        pending=0
        for j in "$@"; do
            [[ -n $(cluster_run squeue -h -j "$j" -o %i 2>/dev/null) ]] && pending=1
        done
        ((pending)) || return 0
        sleep 0.5
    done
    cluster_run squeue
    fail "jobs $* still queued after 5 minutes"
}

# One line per task of array JOB: "TASK STATE EXIT RESTARTS NODE".
tasks_of() {
    cluster_run scontrol -o show job "$1" | python3 -c '
import sys
for line in sys.stdin:
    f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    print(f.get("ArrayTaskId"), f.get("JobState"), f.get("ExitCode"), f.get("Restarts"),
          f.get("BatchHost", f.get("NodeList")))' | sort -n
}

# Fails unless every task of array JOB completed with status 0.
all_completed() {
    local job=$1 what=$2
    if tasks_of "$job" | grep -qv ' COMPLETED 0:0 '; then
        tasks_of "$job" | sed 's/^/  task /'
        tail -n 5 "$tmp"/logs/*"$job"_*.out
        fail "$what: not every task completed"
    fi
}

compare() {
    python3 tests/slurm/compare.py annotate "$bin" "$1" "$tmp/reference" ||
        fail "$2: the tables differ from the unsharded run's"
}

# What each task of array JOB reported (annotate's --json summary in its
# log): per split, its chunks, those done before, now, and retried.
summaries() {
    python3 - "$tmp"/logs/*-"$1"_*.out <<'PY'
import json, re, sys
for path in sorted(sys.argv[1:], key=lambda p: int(re.search(r"_(\d+)\.out$", p).group(1))):
    text = open(path).read()
    m = re.findall(r"^\{$.*?^\}$", text, re.S | re.M)
    if not m:
        print(f"    {path.rsplit('/', 1)[1]}: no summary (killed or refused)")
        continue
    s = json.loads(m[-1])
    for split, t in s["splits"]:
        print(f"    shard {s['shard']}: {split}: {t['chunks_of_shard']} chunks, "
              f"{t['chunks_already_done']} done before, {t['chunks_committed']} now "
              f"({t['chunks_retried']} holding failed boards: {t['boards_retried']} boards searched again), "
              f"{t['failures']} boards failed now; engine restarts {s['retries']}")
PY
}

# --- node: a node killed mid-array ------------------------------------------

case_node() {
    local run=$tmp/run-node job victim=2 t0 line
    cp -a "$tmp/base" "$run"
    t0=$(date +%s)
    job=$(submit node "$run" 6)
    log "node: 6-task array $job; killing n$victim once one of its tasks has committed a chunk"
    # The shards of tasks running on the victim, then a chunk of theirs.
    for _ in $(seq 600); do
        mapfile -t shards < <(tasks_of "$job" | awk -v n="n$victim" '$2 == "RUNNING" && $5 == n {print $1 "/6"}')
        if ((${#shards[@]})) && grep -lsq -e "\"shard\": \"${shards[0]}\"" "$run"/annotate/split=*/chunk-*.json; then
            break
        fi
        sleep 0.2
    done
    ((${#shards[@]})) || fail "node: no task ran on n$victim"
    cluster_kill_node "$victim" || fail "node: n$victim's processes survived SIGKILL"
    log "node: killed n$victim (running shards ${shards[*]}) at $(($(date +%s) - t0)) s"
    wait_jobs "$job"
    all_completed "$job" node
    local requeued
    requeued=$(tasks_of "$job" | awk '$4 > 0 {print $1}' | tr '\n' ' ')
    [[ -n $requeued ]] || fail "node: no task was requeued"
    log "node: array done in $(($(date +%s) - t0)) s; tasks requeued by Slurm: $requeued"
    echo "  what each task reported (a requeued task's log holds both runs; its last):"
    summaries "$job"
    compare "$run" node
    cluster_restart_node "$victim"
    cb_wait_state idle "$victim" 60 || fail "node: n$victim did not come back"
    summary+=("node: n$victim killed mid-array, tasks $requeued requeued, tables equal")
}

# --- commit: tasks killed inside the commit ----------------------------------

case_commit() {
    local run=$tmp/run-commit job point n_tmp n_entries
    cp -a "$tmp/base" "$run"
    # Each point once, each time over the same run: the resubmission first
    # repairs what the previous kill left.
    for point in chunk-written@2 entry-written@1 first-rename@1; do
        job=$(CHESSBENCH_FAILPOINT=$point submit "commit-${point%@*}" "$run" 3)
        wait_jobs "$job"
        local killed
        killed=$(tasks_of "$job" | awk '$2 != "COMPLETED" {print $1}' | tr '\n' ' ')
        [[ -n $killed ]] || fail "commit: no task reached $point"
        n_tmp=$(find "$run" -name '*.parquet.tmp' | wc -l)
        n_entries=$(find "$run/annotate" -name 'chunk-*.json' | wc -l)
        log "commit: array $job with CHESSBENCH_FAILPOINT=$point: tasks $killed killed; $n_entries chunks committed, $n_tmp .tmp files left"
        ((n_tmp > 0)) || fail "commit: the kill at $point left no .tmp file"
        if [[ ${point%@*} != chunk-written ]]; then
            # A commit caught after its entry: readers refuse, saying how to
            # complete it.
            if "$bin" sql "$run" table_a1 >"$tmp/logs/sql-$job.txt" 2>&1; then
                fail "commit: chessbench sql read a run with an interrupted commit"
            fi
            grep -q "committed but its file is still" "$tmp/logs/sql-$job.txt" ||
                fail "commit: sql's refusal does not say why: $(cat "$tmp/logs/sql-$job.txt")"
        fi
    done
    job=$(submit commit-resume "$run" 3)
    wait_jobs "$job"
    all_completed "$job" commit
    log "commit: resubmitted array $job completed:"
    summaries "$job"
    compare "$run" commit
    summary+=("commit: killed at chunk-written, entry-written, first-rename; resubmitted; tables equal")
}

# --- twice: the same array submitted twice at once ---------------------------

case_twice() {
    local run=$tmp/run-twice a b c refused=0 t state line
    cp -a "$tmp/base" "$run"
    # Two copies of one array, held, then released together; an array of
    # another size submitted once they run.
    a=$(SBATCH_HOLD=1 submit twice-a "$run" 3)
    b=$(SBATCH_HOLD=1 submit twice-b "$run" 3)
    cluster_run scontrol release "$a,$b"
    # Once every shard of the 3 is held (its lock file's inode in
    # /proc/locks; probing with flock could itself make a task refuse): the
    # 2-task array must then find the run busy.
    local held inode
    for _ in $(seq 300); do
        held=0
        for t in 0 1 2; do
            inode=$(stat -c %i "$run/annotate/.shard-$t-of-3.lock" 2>/dev/null) || continue
            grep -q ":$inode " /proc/locks && held=$((held + 1))
        done
        ((held == 3)) && break
        sleep 0.05
    done
    c=$(submit twice-c "$run" 2)
    wait_jobs "$a" "$b" "$c"
    for job in "$a" "$b" "$c"; do
        while read -r t state _; do
            line=$(grep -h "^error" "$tmp"/logs/*-"${job}_$t.out" || true)
            if [[ $state == COMPLETED ]]; then
                continue
            elif [[ $line == *"already being annotated by another process"* ||
                $line == *"another process is annotating this run as one of"* ]]; then
                refused=$((refused + 1))
                echo "    job $job task $t refused: ${line##*/annotate/}"
            else
                tail -n 5 "$tmp"/logs/*-"${job}_$t.out"
                fail "twice: job $job task $t ended $state without a clear refusal"
            fi
        done < <(tasks_of "$job")
    done
    log "twice: arrays $a, $b (3 tasks each) and $c (2 tasks) on one run: $refused tasks refused"
    ((refused > 0)) || fail "twice: two copies of one array started together and no task refused"
    # Every shard of the first array either ran or was refused while its
    # twin ran: the run is complete without a resubmission.
    compare "$run" twice
    summary+=("twice: three arrays at once on one run, $refused tasks refused, tables equal")
}

# --- engine: the engine dies on one board -----------------------------------

case_engine() {
    local run=$tmp/run-engine state=$tmp/crash job failures
    cp -a "$tmp/base" "$run"
    mkdir -p "$state"
    echo 100 >"$state/at"
    touch "$state/armed"
    job=$(CRASH_STATE=$state CRASH_ENGINE=$engine ENGINE_UNDER_TEST=$repo/tests/slurm/crashing-engine.py \
        submit engine "$run" 3)
    wait_jobs "$job"
    all_completed "$job" engine
    [[ -s $state/poison ]] || fail "engine: the wrapper never reached its 100th search"
    failures=$("$bin" sql "$run" --quiet --format csv -e "SELECT count(*) FROM failures" | tail -n 1)
    [[ $failures == 1 ]] || fail "engine: $failures boards failed, expected the poisoned one"
    log "engine: array $job completed; the engine crashed $(wc -l <"$state/crashes") times on one board, which failed:"
    "$bin" sql "$run" --quiet --format csv -e "SELECT split, board_id, reason FROM failures" |
        sed 's/^/    /' | cut -c1-200
    summaries "$job"
    rm "$state/armed"
    job=$(CRASH_STATE=$state CRASH_ENGINE=$engine ENGINE_UNDER_TEST=$repo/tests/slurm/crashing-engine.py \
        submit engine-resume "$run" 3)
    wait_jobs "$job"
    all_completed "$job" engine-resume
    log "engine: resubmitted array $job (engine fixed):"
    summaries "$job"
    summaries "$job" | grep -q "holding failed boards: 1 boards searched again" ||
        fail "engine: the resubmission did not say it retried the failed board"
    compare "$run" engine
    summary+=("engine: one board crashed the engine on every try, failed, retried on resume; tables equal")
}

# --- ablate: a grid across the cluster, a training node killed ---------------

case_ablate() {
    local run=$tmp/run-ablate ref=$tmp/run-ablate-ref grid=$tmp/grid.toml ids train t0 victim
    cp -a "$tmp/reference" "$run"
    cp -a "$tmp/reference" "$ref"
    # The base, a loss, and a node limit whose boards the data array
    # annotates again before the train array starts.
    cat >"$grid" <<EOF
[ablate]
seeds = [0]
[ablate.axes]
loss = ["l2"]
nodes = [100]
[annotate]
engine = "$engine"
nodes = 200
max_boards = 384
chunk_boards = 32
jobs = 1
[train]
eval_split = ""
buckets = 32
batch_size = 16
steps = 40
checkpoint_every = 10
eval_records = 64
[eval]
split = "train"
boards = 20
only = ["metrics"]
EOF
    t0=$(date +%s)
    { "$bin" ablate "$grid" "$ref" --no-progress && "$bin" ablate "$grid" "$ref" --report; } \
        >"$tmp/logs/ablate-reference.log" 2>&1 ||
        { tail "$tmp/logs/ablate-reference.log"; fail "ablate: the one-process grid failed"; }
    log "ablate: the grid in one process: $(($(date +%s) - t0)) s"
    t0=$(date +%s)
    ids=$(cd "$tmp" && CHESSBENCH=$bin DATA_TASKS=2 DATA_CPUS=1 cluster_run \
        "$repo/pipeline/slurm/ablate-submit.sh" "$grid" "$run" \
        --cpus-per-task=1 --time=20 --output="$tmp/logs/ablate-%A_%a.out")
    train=$(awk '{print $4}' <<<"$ids")
    log "ablate: submitted $ids; killing the node of a training variant once it has a checkpoint"
    victim=
    for _ in $(seq 900); do
        victim=$(tasks_of "$train" | awk '$2 == "RUNNING" {print $5}' | head -n 1)
        [[ -n $victim && -n $(find "$run" -path '*/checkpoints/*' -print -quit) ]] && break
        sleep 0.2
    done
    [[ -n $victim ]] || fail "ablate: no training task ran"
    cluster_kill_node "${victim#n}"
    log "ablate: killed $victim at $(($(date +%s) - t0)) s"
    wait_jobs $(awk '{print $2, $4, $6}' <<<"$ids" | sed 's/none//')
    all_completed "$train" ablate-train
    local requeued
    requeued=$(tasks_of "$train" | awk '$4 > 0 {print $1}' | tr '\n' ' ')
    [[ -n $requeued ]] || fail "ablate: no training task was requeued"
    log "ablate: done in $(($(date +%s) - t0)) s; training tasks requeued by Slurm: $requeued"
    grep -h "^ablation\|resumed:" "$tmp"/logs/ablate-"$train"_*.out | sed 's/^ */    /'
    python3 tests/slurm/compare.py ablate "$run" "$ref" "$(ls "$ref/ablate")" ||
        fail "ablate: the cluster's grid differs from the one-process grid"
    cluster_restart_node "${victim#n}"
    cb_wait_state idle "${victim#n}" 60 || fail "ablate: $victim did not come back"
    summary+=("ablate: $victim killed while training, tasks $requeued requeued, results and report equal the one-process grid")
}

for c in "${cases[@]}"; do
    t0=$(date +%s)
    "case_$c"
    log "case $c passed in $(($(date +%s) - t0)) s"
done

# Everything the cluster started is gone: processes, namespaces, bridge.
cluster_stop
left=$(ip netns list | awk -v id="$CB_ID-" 'index($1, id) == 1 {print $1}' | tr '\n' ' ')
[[ -z $left ]] || fail "namespaces left after the cluster stopped: $left"
[[ -z $(pgrep -f "$tmp/cluster" || true) ]] || fail "processes left after the cluster stopped"

echo
echo "PASS in $(($(date +%s) - started)) s on $nodes nodes:"
printf '  %s\n' "${summary[@]}"
