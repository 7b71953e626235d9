#!/usr/bin/env bash
# chessbench: GPL-3.0-or-later.
# Learning parity with searchless_chess: trains the tiny
# action-value model with the same recipe in both codebases, on the demo
# run's train split (exported as ChessBench .bag files), and prints both
# test log-losses per seed. searchless_chess runs its own model, loss,
# optimiser, EMA and data loader (bench/searchless_train.py).
#
#   bench/parity.sh RUN SEARCHLESS_CHECKOUT PYTHON [SEEDS...]
#
# PYTHON must import jax, dm-haiku, optax, chex, grain, orbax-checkpoint,
# apache-beam, jaxtyping, etils, zstandard and chess (about 1.1 GB of pip
# packages). Recipe: 2 layers, d=64, 4 heads, K=32, one-hot cross-entropy,
# batch 128, Adam lr 2e-3, global clip 1.0, EMA 0.99, 800 steps; the EMA
# parameters are evaluated on every test record.
set -euo pipefail
run=${1:?RUN}
code=${2:?SEARCHLESS_CHECKOUT}
python=${3:?PYTHON}
shift 3
seeds=("${@:-0 1}")
seeds=(${seeds[*]})
bin=${CHESSBENCH_BIN:-target/release/chessbench}
steps=${STEPS:-800}
bags=$(mktemp -d)
trap 'rm -rf "$bags"' EXIT
for split in train test; do
    "$bin" bag export "$run" --split "$split" --out "$bags/$split" --no-progress >/dev/null
done
here=$(dirname "$0")
printf '%-18s %5s %14s\n' implementation seed test_log_loss
for seed in "${seeds[@]}"; do
    ref=$("$python" "$here/searchless_train.py" --searchless "$code" \
        --train "$bags/train/action_value_data.bag" --test "$bags/test/action_value_data.bag" \
        --steps "$steps" --seed "$seed" 2>/dev/null)
    printf '%-18s %5s %14.4f\n' searchless_chess "$seed" \
        "$(printf '%s' "$ref" | "$python" -c 'import json,sys; print(json.load(sys.stdin)["test_log_loss"])')"
    name=parity_seed$seed
    rm -rf "$run/train/$name"
    "$bin" train "$run" --name "$name" --model tiny --policy action_value --buckets 32 \
        --loss cross_entropy --batch-size 128 --learning-rate 2e-3 --steps "$steps" \
        --seed "$seed" --eval-records 100000000 --no-progress >/dev/null
    printf '%-18s %5s %14.4f\n' chessbench "$seed" \
        "$(tail -n 1 "$run/train/$name/eval.csv" | cut -d, -f4)"
done
