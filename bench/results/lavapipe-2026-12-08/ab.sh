#!/bin/bash
# A/B of the host thread's CPU time per step: old binary (before the flat
# buffers' passes) and new, interleaved, tiny and 9M f32 on lavapipe.
# usage: ab.sh OLD NEW ROUNDS PRESET STEPS OUT
OLD=$1 NEW=$2 ROUNDS=$3 PRESET=$4 STEPS=$5 OUT=$6
export XDG_RUNTIME_DIR=$(mktemp -d)
for r in $(seq 1 $ROUNDS); do
  for side in old new; do
    B=$OLD; [ $side = new ] && B=$NEW
    $B bench-step --model $PRESET --policy action_value --buckets 32 --device wgpu --precision ${PRECISION:-f32} \
      --batch-size 8 --json --steps $STEPS --warmup 2 --no-progress 2>/dev/null \
    | python3 -c "
import json,sys; d=json.load(sys.stdin); h=d['host_time']
print(json.dumps({'round': $r, 'side': '$side', 'preset': '$PRESET', 'precision': '${PRECISION:-f32}', 'host_ms': 1000*h['host'], 'wall_s': d['seconds']/$STEPS}))" >> $OUT
  done
done
