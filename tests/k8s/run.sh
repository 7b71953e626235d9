#!/usr/bin/env bash
# Tests the Kubernetes manifests pipeline/k8s/annotate-job.yaml and
# pipeline/k8s/ablate-jobs.yaml without a cluster:
#
# 1. Schema: every Job validates against the API schemas of Kubernetes 1.29
#    (the oldest the files claim, for backoffLimitPerIndex) to the newest
#    that kubernetes-validate bundles, in strict mode. Strictness is shown:
#    copies with a misspelt field fail, and so do the files against 1.27.
# 2. Lint (tests/k8s/pods.py lint): what the API server refuses beyond the
#    schema (podFailurePolicy, backoffLimitPerIndex, resources), and the
#    files' consistency: completions == CHESSBENCH_SHARD_COUNT, every env
#    variable used by the command line or read by the binary, paths on the
#    volume, one grid for all ablate Jobs, the Jobs the comments name; the
#    train Job's completions == the variants `ablate --plan` counts for its
#    grid.
# 3. The pods, run as the kubelet would start them (tests/k8s/pods.py run):
#    the manifest's command and args, env resolved and $(VAR) expanded,
#    JOB_COMPLETION_INDEX = 0 .. completions-1, /data mapped to a temporary
#    directory, `chessbench` and `stockfish` on PATH as in the image, on a
#    small run (20 games, the first 384 boards):
#    - chessbench-annotate: 3 pods must equal an unsharded `chessbench
#      annotate` of a copy of the run (chunk files, keys, values), each
#      pod's summary must say shard I/3 from the Indexed Job with 1 engine;
#      a retried pod finds its chunks committed and changes nothing; a
#      misspelt option exits 2 (the status the podFailurePolicy's FailIndex
#      rule expects for command-line errors);
#    - chessbench-ablate-data (3 pods), chessbench-ablate-train (3 pods),
#      chessbench-ablate-report, in that order, on a three-variant grid,
#      must equal an unsharded `chessbench ablate` of the copy (results,
#      the data-level variant's annotation), and write the report.
#    What differs from the manifests, and only that, is printed as
#    "override:" lines: completions and CHESSBENCH_SHARD_COUNT 3 (and
#    parallelism at most 3), the annotate pod's CPU request 1 (so
#    CHESSBENCH_JOBS = 1 engine), --movetime-ms=50 replaced by --nodes=300
#    (deterministic and cheaper) plus --max-boards=384 --chunk-boards=64,
#    and the grid file (the tiny grid instead of table_a2.toml).
#
# Usage: tests/k8s/run.sh        (from anywhere; `make test-k8s`)
#
# Environment:
#   CHESSBENCH_BIN  chessbench binary (default ${CARGO_TARGET_DIR:-target}/
#                   release/chessbench)
#   ENGINE          Stockfish (default: stockfish on PATH, else
#                   /usr/games/stockfish)
#   K8S_VENV        virtual environment with tests/k8s/requirements.txt
#                   (default ${CARGO_TARGET_DIR:-target}/k8s-venv; made, or
#                   remade when the requirements changed)
#   CI=true         a missing dependency fails instead of skipping
#   KEEP_TMP=1      keep the temporary directory (runs, pod logs); it is
#                   also kept when the test fails, not when interrupted
#
# Needs python3 with venv and pip (PyPI reachable for the first run), duckdb
# importable by python3 (notebooks/requirements.txt), stockfish.

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"
here=tests/k8s
annotate_yaml=pipeline/k8s/annotate-job.yaml
ablate_yaml=pipeline/k8s/ablate-jobs.yaml
shards=3

log() { echo "[k8s-test $(date +%T)] $*"; }
skip() {
    if [[ ${CI:-} == true ]]; then
        echo "FAIL: $* (CI=true)"
        exit 1
    fi
    echo "SKIP: $*"
    exit 0
}
reported=0
fail() {
    reported=1
    echo "FAIL: $*"
    exit 1
}
trap 'echo "error: line $LINENO: $BASH_COMMAND failed"' ERR

# --- Prerequisites ---------------------------------------------------------

command -v python3 >/dev/null || skip "python3 not installed"
python3 -c 'import duckdb' 2>/dev/null || skip "python3 cannot import duckdb (pip install -r notebooks/requirements.txt)"
engine=${ENGINE:-$(command -v stockfish || echo /usr/games/stockfish)}
[[ -x $engine ]] || skip "stockfish not found (set ENGINE)"
bin=${CHESSBENCH_BIN:-${CARGO_TARGET_DIR:-target}/release/chessbench}
[[ -x $bin ]] || skip "no chessbench binary at $bin (cargo build --release, or set CHESSBENCH_BIN)"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
"$bin" ablate --help 2>/dev/null | grep -q -- --phase || fail "$bin has no ablate --phase"
pgn=data/lichess_2022-06_head2500.pgn.zst
[[ -f $pgn ]] || fail "no $pgn"

started=$(date +%s)

# --- The virtual environment -------------------------------------------------

venv=${K8S_VENV:-${CARGO_TARGET_DIR:-target}/k8s-venv}
want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
if [[ $(cat "$venv/.requirements.sha256" 2>/dev/null) != "$want" ]]; then
    log "making $venv"
    rm -rf "$venv"
    python3 -m venv "$venv" || skip "python3 -m venv failed (Debian: python3-venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt" ||
        skip "could not install $here/requirements.txt"
    echo "$want" >"$venv/.requirements.sha256"
fi
py=$venv/bin/python
validate=$venv/bin/kubernetes-validate

# --- Temporary directory and cleanup -----------------------------------------

tmp=$(mktemp -d /tmp/chessbench-k8s.XXXXXX)
bgpid=
cleanup() {
    local status=$?
    ((status == 0 || status == 130 || reported)) || echo "FAIL: unexpected error (exit status $status)"
    ((status != 130)) || echo "interrupted"
    # The command running in the background (pods.py stops its pods).
    if [[ -n $bgpid ]]; then
        kill "$bgpid" 2>/dev/null || true
        wait "$bgpid" 2>/dev/null || true
    fi
    if [[ ${KEEP_TMP:-0} == 1 || ($status != 0 && $status != 130) ]]; then
        echo "temporary directory kept: $tmp"
    else
        rm -rf "$tmp"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs "$@" in the background and waits, so that INT/TERM reach the traps
# at once; its status is returned.
in_bg() {
    "$@" &
    bgpid=$!
    local status=0
    wait "$bgpid" || status=$?
    bgpid=
    return "$status"
}

# --- 1. Schema -----------------------------------------------------------------

bundled=$("$py" -c '
from kubernetes_validate.utils import all_versions
print(" ".join(dict.fromkeys(all_versions())))')
versions=$("$py" - "$bundled" <<'PY'
import sys
from packaging.version import Version
print(" ".join(v for v in sys.argv[1].split() if Version(v) >= Version("1.29")))
PY
)
log "schema: kubernetes-validate $("$validate" --version 2>&1 | tail -n 1) bundles $(wc -w <<<"$bundled") versions" \
    "(${bundled%% *} .. ${bundled##* }); strict validation against $versions"
for v in $versions; do
    "$validate" --strict --quiet -k "$v" "$annotate_yaml" "$ablate_yaml" >"$tmp/validate.log" 2>&1 ||
        { cat "$tmp/validate.log"; fail "the manifests do not validate against Kubernetes $v"; }
done
jobs_checked=$("$py" -c 'import sys, yaml; print(sum(1 for f in sys.argv[1:] for d in yaml.safe_load_all(open(f)) if d))' \
    "$annotate_yaml" "$ablate_yaml")
echo "  ok   $jobs_checked Jobs valid against $(wc -w <<<"$versions") versions"

# The validator is strict and reads the version: misspelt fields fail, and
# so do the files before 1.29 (backoffLimitPerIndex / maxFailedIndexes).
expect_invalid() { # FILE VERSION PATTERN WHAT
    if "$validate" --strict --quiet -k "$2" "$1" >"$tmp/invalid.log" 2>&1; then
        fail "$4: validated against $2 (the validator is not strict)"
    fi
    grep -q -- "$3" "$tmp/invalid.log" || { cat "$tmp/invalid.log"; fail "$4: no error naming $3"; }
    echo "  ok   $4 fails against $2 ($(grep -o -- "$3[^)]*" "$tmp/invalid.log" | head -n 1))"
}
typo() { # FILE SED-EXPRESSION OUT: a copy of FILE with a misspelt field
    sed "$2" "$1" >"$3"
    ! cmp -s "$1" "$3" || fail "$3: the sed expression changed nothing"
}
typo "$annotate_yaml" 's/^  backoffLimitPerIndex:/  backofLimitPerIndex:/' "$tmp/typo-spec.yaml"
typo "$annotate_yaml" 's/^          volumeMounts:/          volumeMount:/' "$tmp/typo-container.yaml"
typo "$ablate_yaml" 's/^      restartPolicy: Never/      restartpolicy: Never/' "$tmp/typo-pod.yaml"
newest=${bundled##* }
expect_invalid "$tmp/typo-spec.yaml" 1.29.0 "backofLimitPerIndex" "spec.backofLimitPerIndex (misspelt)"
expect_invalid "$tmp/typo-container.yaml" "$newest" "volumeMount" "a container's volumeMount (misspelt)"
expect_invalid "$tmp/typo-pod.yaml" "$newest" "restartpolicy" "a pod's restartpolicy (misspelt)"
expect_invalid "$ablate_yaml" 1.27.0 "'backoffLimitPerIndex', 'maxFailedIndexes' were unexpected" "$ablate_yaml"

# What the files say to do for clusters older than 1.29 (remove
# backoffLimitPerIndex, maxFailedIndexes and the FailIndex rules, use
# backoffLimit alone) validates against 1.26 (podFailurePolicy's beta) .. 1.28.
for f in "$annotate_yaml" "$ablate_yaml"; do
    "$py" - "$f" "$tmp/older-$(basename "$f")" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
for d in docs:
    spec = d["spec"]
    limit = spec.pop("backoffLimitPerIndex", None)
    spec.pop("maxFailedIndexes", None)
    if limit is not None:
        spec.setdefault("backoffLimit", limit)
    if "podFailurePolicy" in spec:
        spec["podFailurePolicy"]["rules"] = [r for r in spec["podFailurePolicy"]["rules"] if r["action"] != "FailIndex"]
yaml.safe_dump_all(docs, open(sys.argv[2], "w"))
PY
    for v in 1.26.0 1.27.0 1.28.0; do
        "$validate" --strict --quiet -k "$v" "$tmp/older-$(basename "$f")" >"$tmp/validate.log" 2>&1 ||
            { cat "$tmp/validate.log"; fail "$f as its comment says to edit it for older clusters does not validate against $v"; }
    done
done
echo "  ok   both files edited for older clusters as their comments say: valid against 1.26 .. 1.28"

# --- 2. Lint -----------------------------------------------------------------------

log "lint: what the API server refuses beyond the schema, and the files' consistency"
"$py" "$here/pods.py" selftest || fail "pods.py selftest"
"$py" "$here/pods.py" lint --bin "$bin" "$annotate_yaml" "$ablate_yaml" || fail "the manifests have problems (above)"

# --- 3. The pods ---------------------------------------------------------------------

vol=$tmp/volume # the ReadWriteMany volume, mounted at /data
mkdir -p "$vol/runs" "$vol/grids" "$tmp/single" "$tmp/logs" "$tmp/bin"
# The unsharded runs find Stockfish as the pods do: `stockfish` on PATH.
ln -s "$engine" "$tmp/bin/stockfish"
unsharded() { in_bg env -i PATH="$tmp/bin:/usr/bin:/bin" HOME="$tmp" "$bin" "$@"; }
log "ingesting 20 games of $(basename "$pgn") into /data/runs/x (the manifests' run)"
"$bin" ingest --no-progress --max-games 20 "$vol/runs/x" "$pgn" >"$tmp/ingest.log"
cp -a "$vol/runs/x" "$tmp/single/run"

# The train Job's completions are table_a2.toml's variants, as its comment says.
train_completions=$("$py" "$here/pods.py" show "$ablate_yaml" |
    python3 -c 'import json, sys; print([j for j in json.load(sys.stdin) if j["name"] == "chessbench-ablate-train"][0]["completions"])')
plan_variants=$("$bin" ablate pipeline/table_a2.toml "$tmp/single/run" --plan --json |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["variants"]))')
[[ $train_completions == "$plan_variants" ]] ||
    fail "chessbench-ablate-train: completions $train_completions, but table_a2.toml has $plan_variants variants"
echo "  ok   chessbench-ablate-train: completions $train_completions == table_a2.toml's variants (--plan)"
rm -rf "$tmp/single/run/ablate"

pods() { # MANIFEST JOB LOGS [pods.py run options...]
    local manifest=$1 job=$2 logs=$3
    shift 3
    in_bg "$py" "$here/pods.py" run "$manifest" --job "$job" --volume "runs=$vol" \
        --bin "$bin" --engine "$engine" --logs "$logs" "$@"
}
annotate_overrides=(--completions "$shards" --cpu 1
    --replace-arg='--movetime-ms=50 -> --nodes=300'
    --add-arg=--max-boards=384 --add-arg=--chunk-boards=64)

log "chessbench-annotate: $shards pods"
t0=$(date +%s)
pods "$annotate_yaml" chessbench-annotate "$tmp/logs" "${annotate_overrides[@]}" ||
    fail "chessbench-annotate: a pod failed (logs above, $tmp/logs)"
t_annotate=$(($(date +%s) - t0))

log "chessbench-annotate: pod 1 again (a retried pod: all its chunks are committed)"
annotation_sums() {
    (cd "$1" && find . -type f \( -path './state_values/*' -o -path './action_values/*' \
        -o -path './failures/*' -o -path './annotate/*' \) | sort | xargs -r md5sum)
}
before=$(annotation_sums "$vol/runs/x")
pods "$annotate_yaml" chessbench-annotate "$tmp/logs-retry" "${annotate_overrides[@]}" --index 1 >"$tmp/retry.log" ||
    { cat "$tmp/retry.log"; fail "chessbench-annotate: the retried pod failed"; }
[[ -n $before && $before == "$(annotation_sums "$vol/runs/x")" ]] || fail "the retried pod changed the run's annotation files"
python3 - "$tmp/logs-retry/chessbench-annotate-1.out" <<'PY' || fail "the retried pod annotated chunks again"
import json, sys
s = json.load(open(sys.argv[1]))
for split, st in s["splits"]:
    assert st["chunks_committed"] == 0 and st["chunks_already_done"] == st["chunks_of_shard"], st
    print(f"  ok   retried pod 1: {split}: {st['chunks_already_done']} of its chunks already committed, none redone, files unchanged")
PY

log "chessbench-annotate: pod 0 with a misspelt option (a command-line error exits 2: FailIndex)"
if pods "$annotate_yaml" chessbench-annotate "$tmp/logs-typo" "${annotate_overrides[@]}" \
    --index 0 --add-arg=--chunk-board=64 >"$tmp/typo.log" 2>&1; then
    fail "a pod with a misspelt option succeeded"
fi
status=$(cat "$tmp/logs-typo/chessbench-annotate-0.exit")
[[ $status == 2 ]] || { cat "$tmp/typo.log"; fail "a misspelt option: exit status $status, not 2"; }
echo "  ok   a misspelt option: exit status 2 ($(grep -m1 -o "unexpected argument[^']*'[^']*'" "$tmp/logs-typo/chessbench-annotate-0.err" || true))"

log "the same annotation unsharded, on the copy"
t0=$(date +%s)
unsharded annotate "$tmp/single/run" --jobs=1 --nodes=300 --max-boards=384 --chunk-boards=64 \
    --no-progress --json >"$tmp/single-annotate.json" || fail "the unsharded annotation failed"
t_single=$(($(date +%s) - t0))

log "comparing: the pods' logs, then the pods' annotation against the unsharded one"
python3 "$here/pod_logs.py" "$tmp/logs" chessbench-annotate "$shards" annotate 1 ||
    fail "the annotate pods' summaries are not those of shards 0..$((shards - 1))"
python3 tests/slurm/compare.py annotate "$bin" "$vol/runs/x" "$tmp/single/run" ||
    fail "the annotate Job's annotation differs from the unsharded run's"

# A three-variant grid with the annotate Job's [annotate] settings (so the
# base run is annotated already): the base, a loss, and a node limit whose
# train split the data Job annotates again. On the volume, like the grid
# the manifests name.
cat >"$vol/grids/tiny.toml" <<'EOF'
[ablate]
seeds = [0]
[ablate.axes]
loss = ["l2"]
nodes = [100]
[annotate]
nodes = 300
max_boards = 384
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
grid_override=(--replace-arg='/data/grids/table_a2.toml -> /data/grids/tiny.toml')
variants=$("$bin" ablate "$vol/grids/tiny.toml" "$vol/runs/x" --plan --json |
    python3 -c 'import json, sys; print(len(json.load(sys.stdin)["variants"]))')
[[ $variants == "$shards" ]] || fail "the tiny grid has $variants variants, not $shards"

log "chessbench-ablate-data ($shards pods), then chessbench-ablate-train ($variants pods), then chessbench-ablate-report"
t0=$(date +%s)
pods "$ablate_yaml" chessbench-ablate-data "$tmp/logs" --completions "$shards" "${grid_override[@]}" ||
    fail "chessbench-ablate-data: a pod failed"
pods "$ablate_yaml" chessbench-ablate-train "$tmp/logs" --completions "$variants" "${grid_override[@]}" ||
    fail "chessbench-ablate-train: a pod failed"
pods "$ablate_yaml" chessbench-ablate-report "$tmp/logs" "${grid_override[@]}" ||
    fail "chessbench-ablate-report: the pod failed"
t_ablate=$(($(date +%s) - t0))
grep -q "$variants of $variants variant runs finished, 0 failed" "$tmp/logs/chessbench-ablate-report-0.out" ||
    { cat "$tmp/logs/chessbench-ablate-report-0.out"; fail "the report pod's log does not count $variants finished variants"; }
grep -q '## `nodes`' "$vol/runs/x/ablate/tiny/report.md" || fail "the report has no nodes section"
echo "  ok   report.md written: $(cat "$tmp/logs/chessbench-ablate-report-0.out")"

log "the same grid unsharded, on the copy"
t0=$(date +%s)
{ unsharded ablate "$vol/grids/tiny.toml" "$tmp/single/run" --no-progress --json >"$tmp/single-ablate.json" &&
    unsharded ablate "$vol/grids/tiny.toml" "$tmp/single/run" --report >"$tmp/single-report.log"; } ||
    fail "the unsharded grid failed"
t_single_ablate=$(($(date +%s) - t0))

log "comparing: the pods' logs, then the Jobs' results against the unsharded grid's"
python3 "$here/pod_logs.py" "$tmp/logs" chessbench-ablate-data "$shards" ablate-data &&
    python3 "$here/pod_logs.py" "$tmp/logs" chessbench-ablate-train "$variants" ablate-train ||
    fail "the ablate pods' summaries are not those of their shards"
python3 tests/slurm/compare.py ablate "$vol/runs/x" "$tmp/single/run" tiny ||
    fail "the ablation Jobs' results differ from the unsharded grid's"

total=$(($(date +%s) - started))
echo
echo "PASS: Kubernetes manifests valid (1.29 .. ${newest}, strict), linted; annotate Job ($shards pods)" \
    "== unsharded; ablation Jobs (data, train, report) == unsharded" \
    "(annotate pods ${t_annotate}s, unsharded ${t_single}s, ablation Jobs ${t_ablate}s, unsharded ${t_single_ablate}s, total ${total}s)"
