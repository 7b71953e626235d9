#!/usr/bin/env bash
# chessbench on a GPU machine (issue 16), one visit of the device machine:
# it has CUDA, PyTorch and JAX but no Rust and no network, so the binaries
# come prebuilt in .gpu/ (`scripts/gpu-bundle`, see there).
#
#   bench/gpu.sh PART...  PART: check jit train eval loader evalbench step9 step136
#
#   check      the CUDA test (tests/cuda.rs): one step on CUDA vs the CPU
#   jit        the first training step of a fresh process (kernel compiling
#              and autotuning), cold and with the caches of the first
#   train      `chessbench train` of the 9M action-value model (the ablation
#              recipe, batch 1024) on the demo run, on CUDA: TRAIN_STEPS
#              (100) steps, then resumed to twice that from its checkpoint;
#              a UCI move with it
#   eval       `chessbench eval --device cuda` on that checkpoint, then the
#              same on the CPU (the two must agree)
#   loader     the loader bench (1 and all cores) on the demo run
#   evalbench  `make bench-eval BENCH_DEVICE=cuda`: boards/s, 9M/136M/270M
#   step9      training step, samples/s: burn (`chessbench bench-step`),
#   step136    PyTorch eager and torch.compile (bench/torch_reference.py) and
#              searchless_chess's JAX step (bench/searchless_step_speed.py),
#              interleaved per shape: 9M (K=32, batch 1024) and 136M (K=128,
#              batch STEP_BATCH_136M, default 256), f32 and bf16
#
# Writes $OUT/summary.txt (one line per run), $OUT/results.jsonl (each
# run's JSON), $OUT/log.txt (everything) and the eval reports.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/cb-gpu-out}
BUNDLE=$ROOT/.gpu
W=/tmp/cb-gpu
mkdir -p "$OUT" "$W/bin"
LOG=$OUT/log.txt
SUM=$OUT/summary.txt
RES=$OUT/results.jsonl
CB=$W/bin/chessbench

say() { echo "$*" | tee -a "$SUM"; }

# run NAME LIMIT_S CMD...: runs CMD under a time limit, output to the log;
# its last line that is a JSON object goes to results.jsonl tagged NAME.
run() {
  local name=$1 limit=$2
  shift 2
  local t0 rc secs
  echo "=== $name: $*" >>"$LOG"
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" >"$W/out.txt" 2>&1
  rc=$?
  secs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  cat "$W/out.txt" >>"$LOG"
  # The last JSON object that starts a line (single-line or pretty-printed).
  python3 - "$W/out.txt" "$name" "$rc" "$secs" >>"$RES" <<'EOF'
import json, sys
path, name, rc, secs = sys.argv[1:]
lines = open(path, errors="replace").read().split("\n")
for i in range(len(lines) - 1, -1, -1):
    if lines[i].startswith("{"):
        try:
            d, _ = json.JSONDecoder().raw_decode("\n".join(lines[i:]))
        except ValueError:
            continue
        print(json.dumps({"run": name, "rc": int(rc), "wall_s": float(secs), **d}))
        break
EOF
  say "$(printf '%-34s rc=%-3s %7ss' "$name" "$rc" "$secs")"
  return $rc
}

setup() {
  [ -d "$BUNDLE/bin" ] || { echo "no $BUNDLE/bin: run scripts/gpu-bundle first" >&2; exit 1; }
  python3 - "$BUNDLE/bin" "$W/bin" <<'EOF'
import lzma, os, sys
src, dst = sys.argv[1:]
for name in os.listdir(src):
    if name.endswith(".xz"):
        out = os.path.join(dst, name[:-3])
        with lzma.open(os.path.join(src, name)) as f, open(out, "wb") as g:
            g.write(f.read())
        os.chmod(out, 0o755)
EOF
  if [ -z "${CUDA_PATH:-}" ]; then
    for c in /usr/local/cuda /opt/cuda "$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x)")")"; do
      [ -f "$c/include/cuda_fp16.h" ] && { export CUDA_PATH=$c; break; }
    done
  fi
  local nvrtc
  nvrtc=$(dirname "$(find "${CUDA_PATH:-/usr/local/cuda}/" /usr/local/lib/python3*/ /opt/torch/ -name 'libnvrtc.so*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$W/bin:${CUDA_PATH:-/usr/local/cuda}/lib64:$nvrtc:${LD_LIBRARY_PATH:-}
  # burn-cuda compiles every kernel at run time (NVRTC) and autotunes each
  # matrix product shape: keep compiled PTX and autotune results in
  # ./target for the whole visit (as the repository's cubecl.toml does),
  # tune at the minimal level, and log what gets compiled and tuned. The
  # repository's cubecl.toml is put back on exit.
  mkdir -p "$ROOT/target"
  cp "$ROOT/cubecl.toml" "$W/cubecl.toml.orig"
  trap 'cp "$W/cubecl.toml.orig" "$ROOT/cubecl.toml"' EXIT
  cat >"$ROOT/cubecl.toml" <<EOF
[compilation]
cache = "target"
[compilation.logger]
level = "basic"
file = "$W/cubecl-compile.log"
[autotune]
level = "${CUBECL_TUNE:-minimal}"
[autotune.logger]
level = "minimal"
file = "$W/cubecl-autotune.log"
EOF
  {
    echo "== machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    nproc
    echo "CUDA_PATH=${CUDA_PATH:-} nvrtc=$nvrtc"
    python3 -c 'import torch, jax; print("torch", torch.__version__, "cuda", torch.version.cuda, "jax", jax.__version__, jax.devices())' 2>&1 | tail -1
  } | tee -a "$SUM"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$W/site" "$BUNDLE"/wheels/*.whl >>"$LOG" 2>&1
  export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
  # The demo run where the binaries expect it.
  mkdir -p runs
  [ -e runs/demo ] || cp -r "$BUNDLE/demo" runs/demo
}

part_check() {
  run cuda-test 300 "$W/bin/cuda-test" --test-threads=1 --nocapture
  grep -E "^(Tiny|M9)" "$LOG" | tail -3 | tee -a "$SUM"
}

part_train() {
  local name=av_9m_gpu
  rm -rf runs/demo/train/$name
  local common=(train --config pipeline/ablation.toml --run runs/demo --name "$name" --device cuda
    --log-every 10 --workers 8 --no-progress --json)
  local steps=${TRAIN_STEPS:-100}
  run "train-9m-cuda-$steps" 200 "$CB" "${common[@]}" --steps "$steps" --checkpoint-every $((steps / 2))
  run "train-9m-cuda-resume-$((2 * steps))" 200 "$CB" "${common[@]}" --steps $((2 * steps)) \
    --checkpoint-every $((steps / 2))
  ls runs/demo/train/$name >>"$SUM" 2>&1
  run uci-9m-cuda 60 bash -c "printf 'uci\nisready\nposition startpos moves e2e4\ngo\nquit\n' | $CB uci --checkpoint runs/demo/train/$name --device cuda"
  grep -E "^bestmove" "$W/out.txt" | tee -a "$SUM"
}

part_eval() {
  local name=av_9m_gpu
  for device in cuda cpu; do
    run "eval-9m-$device" 240 "$CB" eval runs/demo --checkpoint runs/demo/train/$name --device $device \
      --only metrics --only puzzles --boards "${EVAL_BOARDS_STATIC:-500}" --puzzles data/lichess_db_puzzle_head1000.csv \
      --max-puzzles "${EVAL_PUZZLES:-200}" --out "$W/eval-$device" --no-progress --json
    cp "$W/eval-$device/eval.md" "$OUT/eval-$device.md" 2>/dev/null
  done
}

part_loader() {
  CHESSBENCH_BENCH_RUN=runs/demo run loader 180 "$W/bin/bench-loader"
  tail -4 "$W/out.txt" | tee -a "$SUM"
}

part_evalbench() {
  BENCH_DEVICE=cuda BENCH_PRESETS=${EVAL_PRESETS:-9m,136m,270m} BENCH_BOARDS=${EVAL_BOARDS:-200} \
    run evalbench-cuda 300 "$W/bin/bench-eval"
  tail -8 "$W/out.txt" | tee -a "$SUM"
}

# Cold start: the first step of a fresh process compiles every kernel
# (NVRTC) and autotunes every matrix product; then the same again with the
# PTX and autotune caches from the first.
part_jit() {
  local n
  for pass in cold warm; do
    n=$(cat "$W/cubecl-compile.log" 2>/dev/null | wc -l)
    run "first-step-burn-9m-f32-$pass" "${JIT_LIMIT:-240}" "$CB" bench-step --model 9m --buckets 32 \
      --batch-size 1024 --steps 1 --warmup 0 --device cuda --json
    say "  compile log lines +$(( $(cat "$W/cubecl-compile.log" 2>/dev/null | wc -l) - n ))"
  done
}

# One shape: IMPLS (burn torch torchcompile jax) x PRECISIONS (f32 bf16).
# burn's f32 matrix products run on TF32 tensor cores (cubek-matmul uses
# tf32 stages for f32 inputs whenever a kernel uses the tensor cores), so
# the references run f32 with TF32 matrix products too: PyTorch
# `--precision tf32`, JAX's default matmul precision.
step_shape() { # PRESET BUCKETS BATCH STEPS
  local preset=$1 k=$2 batch=$3 steps=$4 p impl tp
  for p in ${STEP_PRECISIONS:-f32 bf16}; do
    tp=$([ "$p" = f32 ] && echo tf32 || echo "$p")
    for impl in ${STEP_IMPLS:-burn torch jax torchcompile}; do
      case $impl in
        burn) run "step-burn-$preset-$p-b$batch" "${BURN_LIMIT:-200}" "$CB" bench-step --model "$preset" \
          --buckets "$k" --batch-size "$batch" --steps "$steps" --warmup 3 --device cuda --precision "$p" --json ;;
        torch) run "step-torch-$preset-$tp-b$batch" 120 python3 bench/torch_reference.py --preset "$preset" \
          --buckets "$k" --batch "$batch" --steps "$steps" --warmup 5 --device cuda --precision "$tp" ;;
        torchcompile) run "step-torchcompile-$preset-$tp-b$batch" 200 python3 bench/torch_reference.py \
          --preset "$preset" --buckets "$k" --batch "$batch" --steps "$steps" --warmup 5 --device cuda \
          --precision "$tp" --compile ;;
        jax) run "step-jax-$preset-$p-b$batch" 200 python3 bench/searchless_step_speed.py \
          --searchless "$BUNDLE/searchless" --preset "$preset" --buckets "$k" --batch "$batch" \
          --steps "$steps" --warmup 3 --precision "$p" ;;
      esac
    done
  done
}

part_step9() { step_shape 9m 32 1024 "${STEP_STEPS_9M:-20}"; }
part_step136() { step_shape 136m 128 "${STEP_BATCH_136M:-256}" "${STEP_STEPS_136M:-10}"; }

setup
for part in "$@"; do
  case "$part" in
    check | jit | train | eval | loader | evalbench | step9 | step136) "part_$part" ;;
    *) echo "unknown part $part (check jit train eval loader evalbench step9 step136)" >&2; exit 2 ;;
  esac
done
# What burn-cuda compiled and tuned (kernel names, one line each).
[ -f "$W/cubecl-compile.log" ] && gzip -c "$W/cubecl-compile.log" >"$OUT/cubecl-compile.log.gz"
[ -f "$W/cubecl-autotune.log" ] && tail -c 8000000 "$W/cubecl-autotune.log" >"$OUT/cubecl-autotune.log"
echo "== results" >>"$SUM"
python3 - "$RES" <<'EOF' | tee -a "$SUM"
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1])]
except FileNotFoundError:
    rows = []
for r in rows:
    if "samples_per_s" in r:
        print(f'{r["run"]:<34} {r["samples_per_s"]:>10.0f} samples/s {r.get("model_flops_per_s", 0) / 1e12:>7.1f} TFLOP/s')
EOF
