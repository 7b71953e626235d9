#!/usr/bin/env bash
# The kernels a training step launches after burn's fusion, and the kernels
# a cold process compiles, on wgpu (Mesa's lavapipe where there is no GPU):
# the tiny and 9M action-value models, the project's fused kernels against
# burn's operations, f32, each in a fresh process (`bench-step
# --count-kernels`); beside each, the operations the same step issues
# before fusion (`bench-step --count-ops`, on the CPU). Kernel counts do
# not depend on the batch size, so the batches are small.
#
#   bench/wgpu_kernels.sh BIN OUT_DIR
#
# BIN is a chessbench built with `--features wgpu`; OUT_DIR/kernels.jsonl
# gets one bench-step JSON line per run (its `kernels` and `ops` fields),
# tagged with the model and the kernels used. `make bench-wgpu` runs it.
set -euo pipefail
bin=$1
out=$2
mkdir -p "$out"
rows="$out/kernels.jsonl"
: > "$rows"
# Mesa's loader warns when XDG_RUNTIME_DIR is unset (no display here).
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
for model in tiny 9m; do
  for kernels in fused burn; do
    for what in count-kernels count-ops; do
      if [ "$what" = count-kernels ]; then
        device=(--device wgpu --batch-size 4 --steps 2 --warmup 1)
      else
        device=(--device cpu --batch-size 2 --steps 1 --warmup 1)
      fi
      echo "== $model, $kernels kernels, --$what" >&2
      start=$(date +%s%N)
      # An empty kernel and autotune cache: a cold process.
      CHESSBENCH_KERNEL_CACHE=$(mktemp -d) CHESSBENCH_ATTENTION=$kernels CHESSBENCH_LAYERS=$kernels \
        "$bin" bench-step --model "$model" --policy action_value --buckets 128 \
          "${device[@]}" "--$what" --json > "$out/row.json"
      ms=$(( ($(date +%s%N) - start) / 1000000 ))
      python3 - "$out/row.json" "$model" "$kernels" "$what" "$ms" >> "$rows" <<'PY'
import json, sys
row = json.load(open(sys.argv[1]))
row["tag"] = {"model": sys.argv[2], "kernels": sys.argv[3], "count": sys.argv[4], "process_s": round(int(sys.argv[5]) / 1000, 1)}
print(json.dumps(row))
PY
      rm -f "$out/row.json"
    done
  done
done
echo "rows in $rows" >&2
