#!/usr/bin/env bash
# Submits a chessbench ablation grid to Slurm as three jobs:
#
#   1. a job array annotating the data (`--phase data`, DATA_TASKS tasks:
#      the base run and every search-limit variant's train split, sharded
#      as `chessbench annotate` shards), when the grid has an [annotate]
#      table or search-limit axes;
#   2. a job array of one task per variant (`--phase train`), after 1;
#   3. the report (`--report`), after 2 whatever its outcome.
#
# Usage:
#   pipeline/slurm/ablate-submit.sh GRID [RUN_DIR] [sbatch options for the
#       training array...]
#
#   pipeline/slurm/ablate-submit.sh pipeline/table2.toml runs/paper \
#       --gres=gpu:1 --cpus-per-task=8
#
# Environment:
#   CHESSBENCH   chessbench executable (default: `chessbench` on PATH); also
#                exported to the jobs
#   DATA_TASKS   tasks of the annotation array (default 16)
#   DATA_CPUS    CPUs per annotation task (default 32)
#
# Options for all three jobs (account, partition, ...) go in sbatch's own
# environment variables, e.g. SBATCH_ACCOUNT=proj SBATCH_PARTITION=gpu.
#
# Prints the three job ids. Resubmitting resumes (see ablate.sbatch).

set -euo pipefail

if [[ $# -lt 1 ]]; then
    echo "usage: pipeline/slurm/ablate-submit.sh GRID [RUN_DIR] [sbatch options...]" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${CHESSBENCH:-chessbench}
export CHESSBENCH=$bin
grid=$1
shift
target=("$grid")
if [[ $# -ge 1 && $1 != -* ]]; then
    target+=("$1")
    shift
fi

# The grid is checked here, before anything is submitted.
plan=$("$bin" ablate "${target[@]}" --plan --json)
variants=$(grep -c '"index"' <<<"$plan" || true)
annotates=$(python3 -c 'import json, sys; print(int(json.load(sys.stdin)["annotates"]))' <<<"$plan")
[[ $variants -gt 0 ]] || { echo "no variants in $grid" >&2; exit 1; }

dependency=()
data_job=
if [[ $annotates == 1 ]]; then
    data_job=$(sbatch --parsable --array="0-$((${DATA_TASKS:-16} - 1))" \
        --cpus-per-task="${DATA_CPUS:-32}" --job-name=chessbench-ablate-data \
        "$here/ablate.sbatch" "${target[@]}" --phase data)
    dependency=(--dependency="afterok:$data_job" --kill-on-invalid-dep=yes)
fi
train_job=$(sbatch --parsable --array="0-$((variants - 1))" ${dependency[@]+"${dependency[@]}"} \
    --job-name=chessbench-ablate-train "$@" \
    "$here/ablate.sbatch" "${target[@]}" --phase train)
report_job=$(sbatch --parsable --dependency="afterany:$train_job" --ntasks=1 \
    --cpus-per-task=1 --job-name=chessbench-ablate-report --output=ablate-report-%j.out \
    --wrap="$(printf '%q ' "$bin" ablate "${target[@]}" --report)")
echo "data ${data_job:-none} train $train_job report $report_job"
