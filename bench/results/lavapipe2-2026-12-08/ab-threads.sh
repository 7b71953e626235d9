#!/bin/bash
# A/B of the device handle's two modes in one binary, interleaved: CubeCL's
# device-runner threads (CUBECL_DEVICE_THREADS unset, the published
# behaviour) and the services inline on the calling thread
# (CUBECL_DEVICE_THREADS=0). bench-step on lavapipe; per step: the main
# thread's CPU, each other host thread's (DSU: burn-fusion's runner, DSD:
# CubeCL's runtime server), and the wall time.
# usage: ab-threads.sh BIN ROUNDS PRESET STEPS OUT   (PRECISION=f32|f16)
BIN=$1 ROUNDS=$2 PRESET=$3 STEPS=$4 OUT=$5
export XDG_RUNTIME_DIR=$(mktemp -d)
for r in $(seq 1 $ROUNDS); do
  for side in threads inline; do
    if [ $side = inline ]; then export CUBECL_DEVICE_THREADS=0; else unset CUBECL_DEVICE_THREADS; fi
    $BIN bench-step --model $PRESET --policy action_value --buckets 32 --device wgpu --precision ${PRECISION:-f32} \
      --batch-size 8 --json --steps $STEPS --warmup 2 --no-progress 2>/dev/null \
    | python3 -c "
import json,sys; d=json.load(sys.stdin); h=d['host_time']
others={n: 1000*t for n, t in h['others']}
ds=sum(t for n, t in others.items() if n.startswith('DS'))
print(json.dumps({'round': $r, 'side': '$side', 'preset': '$PRESET', 'precision': '${PRECISION:-f32}', 'host_ms': 1000*h['host'], 'device_threads_ms': ds, 'others_ms': others, 'wall_s': d['seconds']/$STEPS}))" >> $OUT
  done
done
