#!/usr/bin/env bash
# chessbench on a GPU machine that has CUDA, PyTorch and JAX but no Rust and
# no network: the binaries come prebuilt in .gpu/ (`scripts/gpu-bundle`, see
# there).
#
#   bench/gpu.sh PART...  PART: jit check step9 attention layers account
#                               step136 curves train eval loader evalbench
#                               evalpaper
#
#   jit        the first training step of a fresh process (kernel compiling
#              and autotuning), f32 then bf16 (JIT_PRECISIONS), each cold
#              (an empty kernel cache and CUDA driver cache of its own) and
#              then with the caches of the cold run; JIT_SHARED=1 compiles
#              into the measurement's cache instead, so later parts start
#              warm
#   check      the CUDA test (tests/cuda.rs): one step on CUDA vs the CPU,
#              f32 and mixed bf16; the fused attention, layer norm and
#              SwiGLU kernels against their reference; boards scored
#              together vs alone
#   train      `chessbench train` of the 9M action-value model (the ablation
#              recipe, batch 1024) on the demo run, on CUDA: TRAIN_STEPS
#              (100) steps, then resumed to twice that from its checkpoint;
#              a UCI move with it
#   eval       `chessbench eval --device cuda` on that checkpoint, then the
#              same on the CPU (the two must agree)
#   loader     the loader bench (1 and all cores) on the demo run
#   evalbench  the carried bench-eval (benches/eval.rs) on CUDA: boards/s
#              across boards (bf16, f32; the host stages' shares, one pass
#              split into copies and network), per board (a UCI move's
#              latency), the host alone and searchless_chess's JAX
#              predictor, 9M/136M/270M (EVAL_PRESETS) in one process, runs
#              eval-PRESET-IMPL
#   evalpaper  the paper's evaluation timed: `chessbench eval` of a random
#              270M checkpoint on 10,000 puzzles (the carried 1,000,
#              repeated) and 1,000 test boards' metrics, then the UCI
#              engine's latency per move (runs evalpaper-270m-PRECISION,
#              uci-270m-PRECISION)
#   step9      training step, samples/s: PyTorch eager and torch.compile
#   step136    (bench/torch_reference.py), searchless_chess's JAX step
#              (bench/searchless_step_speed.py) and burn (`chessbench
#              bench-step`, then again with --profile for its phases), per
#              precision: f32 (TF32 products; PyTorch `tf32`) and bf16
#              (mixed: PyTorch `amp-bf16`); 9M (K=32, batch 1024) and 136M
#              (K=128, batch STEP_BATCH_136M, default 512).
#              STEP_PRODUCTS="cublaslt burn" adds burn with CubeCL's own
#              products (CHESSBENCH_PRODUCTS=burn; a cold autotune, minutes);
#              STEP_ATTENTION="fused burn" adds burn's attention instead of
#              the fused kernels (CHESSBENCH_ATTENTION=burn, runs
#              step-burn-burnattention-...); STEP_LAYERS="fused burn"
#              adds burn's layer norm and SwiGLU (CHESSBENCH_LAYERS=burn,
#              runs step-burn-burnlayers-...); STEP_THREADS="1 0" adds
#              burn with its device services inline on the step's thread
#              (CUBECL_DEVICE_THREADS=0, runs step-burn-inline-...)
#   batches    the 9M step at BATCHES (128 512 1024) for burn and PyTorch
#              eager in BATCH_PRECISIONS (f32), and per implementation the
#              line ms/step = fixed + per sample x batch through them
#   attention  the fused attention's effect on the step: burn 9M (K=32,
#              batch 1024) in f32 and mixed bf16 with the fused kernels
#              and with burn's attention, then PyTorch eager TF32 and
#              torch.compile amp-bf16 on the same card
#   layers     the fused layer norm and SwiGLU's effect on the step: burn
#              9M in f32 and mixed bf16 with the fused layers and with
#              burn's (fused attention in both)
#   curves     the 9M ablation recipe, 300 steps in f32 and in mixed bf16
#              from the same seed: their loss curves compared
#   account    where one step's time goes, kernel by kernel: burn's 9M step
#              (with the fused attention, layer norm and SwiGLU, then with
#              burn's: their share before and after) per precision
#              (ACCOUNT_PRECISIONS, ACCOUNT_KERNELS, ACCOUNT_STEPS,
#              ACCOUNT_PREWARM) under
#              nsys (timed steps only) when the machine has it, CubeCL's
#              own per-kernel profile otherwise (a device sync around each
#              launch: the step runs slower, cuBLASLt's products are not
#              in it), and PyTorch's torch.compile step under
#              torch.profiler; grouped into account-*.md by
#              bench/kernel_account.py (CubeCL's raw logs in
#              account-cubecl-logs.tar.gz)
#
# Run names: step-IMPL-PRESET-PRECISION-bBATCH (IMPL burn, burncubecl,
# torch, torchcompile, jax; PRECISION as each implementation names it).
# Writes $OUT/summary.txt (one line per run), $OUT/results.jsonl (each
# run's JSON, with its rc, the bundle's commit, the kernel choices it was
# asked for and, for burn, what ran: products, attention and layers fused,
# mixed or burn's, and the fallbacks), $OUT/log.txt (everything), the
# kernel accounts and the eval reports. burn's timed step rows with the
# fused kernels (step9, attention, layers, batches; not the profile,
# jit, account or step136 rows) run with --require-fused (REQUIRE_FUSED=0
# leaves it out), so a shape that falls back fails its row instead of
# timing burn's operations. The
# summary ends with the fused kernels' verdicts and any fallbacks; a run
# that fails or runs over its limit is listed there and makes the script
# exit 1 (after every part has run).
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

# The commit the bundle was built from (scripts/gpu-bundle writes it; a
# trailing "+dirty" when the working tree had changes), in every row.
COMMIT=$(cat "$BUNDLE/commit" 2>/dev/null || git -C "$ROOT" describe --always --dirty=+dirty 2>/dev/null || echo unknown)
# The runs that failed (a non-zero exit or a time-out), listed at the end;
# any makes this script exit non-zero.
FAILED=()

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
  # The last JSON object that starts a line (single-line or pretty-printed),
  # with the commit and the kernel choices the run was given; a run that
  # printed none still gets a row (its rc and time), so a failure is in
  # results.jsonl too.
  python3 - "$W/out.txt" "$name" "$rc" "$secs" "$COMMIT" >>"$RES" <<'EOF'
import json, os, sys
path, name, rc, secs, commit = sys.argv[1:]
lines = open(path, errors="replace").read().split("\n")
row = {}
for i in range(len(lines) - 1, -1, -1):
    if lines[i].startswith("{"):
        try:
            row, _ = json.JSONDecoder().raw_decode("\n".join(lines[i:]))
        except ValueError:
            continue
        break
asked = {k: os.environ[k] for k in ("CHESSBENCH_PRODUCTS", "CHESSBENCH_ATTENTION", "CHESSBENCH_LAYERS", "CUBECL_DEVICE_THREADS") if k in os.environ}
head = {"run": name, "rc": int(rc), "wall_s": float(secs), "commit": commit, "asked": asked}
if "attention" in row:
    # What ran, as the binary reports it: fused, mixed (some shapes fell
    # back: see "fallbacks") or burn.
    head["ran"] = {k: row.get(k) for k in ("products", "attention", "layers")}
    head["ran"]["fallbacks"] = len(row.get("fallbacks", []))
print(json.dumps({**head, **row}))
EOF
  say "$(printf '%-34s rc=%-3s %7ss' "$name" "$rc" "$secs")"
  case $rc in
    0) ;;
    124) FAILED+=("$name (rc 124: over its limit of $limit s)") ;;
    137) FAILED+=("$name (rc 137: killed, by its limit of $limit s or for memory)") ;;
    *) FAILED+=("$name (rc $rc)") ;;
  esac
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
  # cuBLASLt, loaded at run time by the linear layers' products: the
  # toolkit's, or the one PyTorch's wheels bring.
  local cublas
  cublas=$(dirname "$(find "${CUDA_PATH:-/usr/local/cuda}/" /usr/local/lib/python3*/ /usr/lib/python3*/ /opt/ \
    -name 'libcublasLt.so*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$W/bin:${CUDA_PATH:-/usr/local/cuda}/lib64:$nvrtc:$cublas:${LD_LIBRARY_PATH:-}
  NSYS=$(command -v nsys || ls -d /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/*/bin/nsys \
    /usr/local/cuda*/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  # burn-cuda compiles every kernel at run time (NVRTC) and autotunes some:
  # chessbench keeps compiled kernels and autotune results in one directory
  # per source build under CHESSBENCH_KERNEL_CACHE (src/model/gpu/cache.rs),
  # here ./target/kernels for the whole measurement (a warm machine keeps
  # it between calls). A cubecl.toml written here tunes at CubeCL's default
  # level, as a user's process does (CUBECL_TUNE=minimal|extensive|full
  # changes it), and logs what gets compiled and tuned; the repository's
  # own (if any) is put back on exit.
  export CHESSBENCH_KERNEL_CACHE=${CHESSBENCH_KERNEL_CACHE:-$ROOT/target/kernels}
  mkdir -p "$CHESSBENCH_KERNEL_CACHE"
  if [ -f "$ROOT/cubecl.toml" ]; then
    cp "$ROOT/cubecl.toml" "$W/cubecl.toml.orig"
    trap 'cp "$W/cubecl.toml.orig" "$ROOT/cubecl.toml"' EXIT
  else
    trap 'rm -f "$ROOT/cubecl.toml"' EXIT
  fi
  cat >"$ROOT/cubecl.toml" <<EOF
[compilation.logger]
level = "basic"
file = "$W/cubecl-compile.log"
[autotune]
level = "${CUBECL_TUNE:-balanced}"
[autotune.logger]
level = "minimal"
file = "$W/cubecl-autotune.log"
EOF
  {
    echo "== machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    nproc
    echo "CUDA_PATH=${CUDA_PATH:-} nvrtc=$nvrtc cublasLt=$cublas nsys=${NSYS:-none}"
    python3 -c 'import torch, jax; print("torch", torch.__version__, "cuda", torch.version.cuda, "jax", jax.__version__, jax.devices())' 2>&1 | tail -1
  } | tee -a "$SUM"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$W/site" "$BUNDLE"/wheels/*.whl >>"$LOG" 2>&1
  export PYTHONPATH=$W/site${PYTHONPATH:+:$PYTHONPATH}
  # The demo run where the binaries expect it.
  mkdir -p runs
  [ -e runs/demo ] || cp -r "$BUNDLE/demo" runs/demo
}

part_check() {
  run cuda-test "${CHECK_LIMIT:-300}" "$W/bin/cuda-test" --test-threads=1 --nocapture
  grep -E "^(Tiny|M9|F32|Bf16|BF16)|test result" "$W/out.txt" | tee -a "$SUM"
}

part_train() {
  local name=av_9m_gpu
  rm -rf runs/demo/train/$name
  local common=(train runs/demo --config pipeline/ablation.toml --name "$name" --device cuda
    --log-every 10 --jobs 8 --no-progress --json)
  local steps=${TRAIN_STEPS:-100}
  run "train-9m-cuda-$steps" 200 "$CB" "${common[@]}" --steps "$steps" --checkpoint-every $((steps / 2))
  run "train-9m-cuda-resume-$((2 * steps))" 200 "$CB" "${common[@]}" --steps $((2 * steps)) \
    --checkpoint-every $((steps / 2))
  ls runs/demo/train/$name >>"$SUM" 2>&1
  run uci-9m-cuda 60 bash -c "printf 'uci\nisready\nposition startpos moves e2e4\ngo\nquit\n' | $CB uci --checkpoint runs/demo/train/$name --device cuda"
  grep -E "^bestmove" "$W/out.txt" | tee -a "$SUM"
}

# Mixed bf16 learns as f32 does: the 9M ablation recipe for CURVE_STEPS
# (300) steps from the same seed in both precisions, then their loss curves
# side by side (mean and largest difference of the logged losses).
part_curves() {
  local p steps=${CURVE_STEPS:-300}
  for p in f32 bf16; do
    rm -rf "runs/demo/train/curve_9m_$p"
    run "curve-9m-cuda-$p-$steps" 300 "$CB" train runs/demo --config pipeline/ablation.toml \
      --name "curve_9m_$p" --device cuda --precision "$p" --steps "$steps" --log-every 10 \
      --checkpoint-every "$steps" --jobs 8 --no-progress --json
    cp "runs/demo/train/curve_9m_$p/metrics.csv" "$OUT/curve-9m-$p-metrics.csv" 2>/dev/null
    cp "runs/demo/train/curve_9m_$p/eval.csv" "$OUT/curve-9m-$p-eval.csv" 2>/dev/null
  done
  python3 - "$OUT/curve-9m-f32-metrics.csv" "$OUT/curve-9m-bf16-metrics.csv" <<'PY' | tee -a "$SUM"
import csv, sys
try:
    a, b = ({int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(p))} for p in sys.argv[1:])
except (OSError, KeyError, ValueError) as e:
    sys.exit(f"curves: {e}")
steps = sorted(set(a) & set(b))
if not steps:
    sys.exit("curves: no common steps")
d = [b[s] - a[s] for s in steps]
print(f"curves: {len(steps)} rows, bf16 - f32 loss mean {sum(d) / len(d):+.4f}, "
      f"largest |diff| {max(map(abs, d)):.4f}; last f32 {a[steps[-1]]:.4f} bf16 {b[steps[-1]]:.4f}")
PY
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

# Evaluation throughput per preset: across boards (bf16 and f32, with the
# host stages' shares and one synchronised pass: copies in, network, copies
# back), per board (the UCI engine's latency), the host's work alone, and
# searchless_chess's JAX predictor on the same boards (a pass per board, and
# packed as ours); every eval-* line goes to results.jsonl. All presets in
# one process (kernels compiled once are reused across presets); each line
# is printed as its measurement ends, so a time-out keeps the finished ones.
part_evalbench() {
  local presets=${EVAL_PRESETS:-9m 136m 270m}
  BENCH_DEVICE=cuda BENCH_PRESETS=${presets// /,} BENCH_BOARDS=${EVAL_BOARDS:-200} \
    BENCH_PRECISIONS=${EVAL_PRECISIONS:-bf16,f32} SEARCHLESS_CHESS=$BUNDLE/searchless \
    CHESSBENCH_JAX_PYTHON=python3 run evalbench "${EVAL_LIMIT:-500}" "$W/bin/bench-eval"
  grep -v '^{' "$W/out.txt" | grep -E 'boards/s|passes|one pass' | tee -a "$SUM"
  python3 - "$W/out.txt" evalbench >>"$RES" <<'EOF'
import json, sys
for line in open(sys.argv[1], errors="replace"):
    if line.startswith('{"name":"eval-'):
        d = json.loads(line)
        print(json.dumps({"run": d["name"], "part": sys.argv[2], **d}))
EOF
}

# The paper's evaluation as one timed command: `chessbench eval` of a
# randomly initialised 270M action-value checkpoint (`chessbench checkpoint
# init`; timing only, the scores mean nothing) on PAPER_PUZZLES (10,000)
# puzzles and the static metrics of PAPER_BOARDS (1,000) test boards, per
# precision (PAPER_PRECISIONS, bf16); then the UCI engine's latency per move
# with that checkpoint (bench/uci_latency.py, PAPER_UCI_MOVES moves). The
# bundle carries 1,000 real Lichess puzzles: they are repeated, with new
# ids, up to PAPER_PUZZLES (the same boards again cost the same time).
part_evalpaper() {
  local ck=$W/av_270m_random p n=${PAPER_PUZZLES:-10000}
  [ -d "$ck" ] || run checkpoint-init-270m 240 "$CB" checkpoint init --policy action_value --model 270m \
    --out "$ck" --json || return
  python3 - data/lichess_db_puzzle_head1000.csv "$W/puzzles.csv" "$n" <<'EOF'
import csv, itertools, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = list(csv.DictReader(open(src, newline="")))
with open(dst, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    for i, row in zip(range(n), itertools.cycle(rows)):
        w.writerow({**row, "PuzzleId": f"{row['PuzzleId']}-{i // len(rows)}"})
EOF
  for p in ${PAPER_PRECISIONS:-bf16}; do
    run "evalpaper-270m-$p" "${PAPER_LIMIT:-420}" "$CB" eval runs/demo --checkpoint "$ck" --device cuda \
      --precision "$p" --only metrics --only puzzles --boards "${PAPER_BOARDS:-1000}" --puzzles "$W/puzzles.csv" \
      --max-puzzles "$n" --out "$W/evalpaper-$p" --no-progress --json
    cp "$W/evalpaper-$p/eval.md" "$OUT/evalpaper-$p.md" 2>/dev/null
    run "uci-270m-$p" 240 python3 bench/uci_latency.py --positions data/lichess_db_puzzle_head1000.csv \
      --count "${PAPER_UCI_MOVES:-100}" --name "uci-270m-$p" -- "$CB" uci --checkpoint "$ck" --device cuda --precision "$p"
    tail -1 "$W/out.txt" | tee -a "$SUM"
  done
}

# Cold start: the first step of a fresh process compiles every kernel
# (NVRTC) and autotunes what CubeCL still tunes; then the same again with
# the PTX and autotune caches from the first. Per precision.
part_jit() {
  # Cold: an empty kernel cache and an empty CUDA driver cache (PTX to
  # machine code), as on a fresh machine; warm: the same run again with
  # what the cold one left.
  local n p cache
  for p in ${JIT_PRECISIONS:-f32 bf16}; do
    if [ "${JIT_SHARED:-0}" = 1 ]; then
      # JIT_SHARED=1: the cold pass compiles into the measurement's own
      # kernel cache (empty on a fresh machine), so the parts after it
      # start warm instead of compiling everything a second time.
      # CUDA's driver cache goes beside it for the parts after it too.
      # With two precisions the second's pass finds the first's kernels
      # (the shared ones are warm), and says so.
      cache=$CHESSBENCH_KERNEL_CACHE
      export CUDA_CACHE_PATH=$cache/nv
      [ -z "$(ls -A "$cache" 2>/dev/null)" ] || say "  jit: $cache is not empty: the cold pass is not cold"
    else
      cache=$W/jit-cache-$p
      rm -rf "$cache"
    fi
    mkdir -p "$cache/nv"
    for pass in cold warm; do
      n=$(cat "$W/cubecl-compile.log" 2>/dev/null | wc -l)
      CHESSBENCH_KERNEL_CACHE=$cache CUDA_CACHE_PATH=$cache/nv run "first-step-burn-9m-$p-$pass" \
        "${JIT_LIMIT:-240}" "$CB" bench-step --model 9m --buckets 32 --batch-size 1024 --steps 1 --warmup 0 \
        --device cuda --precision "$p" --json
      say "  compile log lines +$(( $(cat "$W/cubecl-compile.log" 2>/dev/null | wc -l) - n )), cache $(du -sh "$cache" | cut -f1)"
    done
  done
}

# One shape: IMPLS (torch torchcompile jax burn) x PRECISIONS (f32 bf16).
# f32 means f32 tensors with TF32 matrix products for all (cuBLASLt's
# FAST_TF32 compute for burn, PyTorch `--precision tf32`, JAX's default
# matmul precision); bf16 means mixed precision (burn's bf16, PyTorch's
# autocast `amp-bf16`, JAX's bf16 as searchless_chess's step takes it).
step_shape() { # PRESET BUCKETS BATCH STEPS
  local preset=$1 k=$2 batch=$3 steps=$4 p impl tp products name fused_flag
  for p in ${STEP_PRECISIONS:-f32 bf16}; do
    tp=$([ "$p" = f32 ] && echo tf32 || echo amp-bf16)
    for impl in ${STEP_IMPLS:-torch torchcompile jax burn}; do
      case $impl in
        burn)
          for products in ${STEP_PRODUCTS:-cublaslt}; do
          for attn in ${STEP_ATTENTION:-fused}; do
          for layers in ${STEP_LAYERS:-fused}; do
          for threads in ${STEP_THREADS:-1}; do
            name=$([ "$products" = burn ] && echo burncubecl || echo burn)
            [ "$attn" = burn ] && name=$name-burnattention
            [ "$layers" = burn ] && name=$name-burnlayers
            # CUBECL_DEVICE_THREADS=0: burn-fusion's and CubeCL's services
            # inline on the step's thread instead of their runner threads
            # (vendor/README.md).
            [ "$threads" = 0 ] && name=$name-inline
            # A row timed as fused is fused throughout: --require-fused
            # stops the run (a failed row) where any shape fell back.
            fused_flag=()
            [ "$attn" = fused ] && [ "$layers" = fused ] && [ "${REQUIRE_FUSED:-1}" = 1 ] &&
              fused_flag=(--require-fused)
            CHESSBENCH_PRODUCTS=$products CHESSBENCH_ATTENTION=$attn CHESSBENCH_LAYERS=$layers \
              CUBECL_DEVICE_THREADS=$threads run "step-$name-$preset-$p-b$batch" \
              "${BURN_LIMIT:-300}" "$CB" bench-step --model "$preset" --buckets "$k" --batch-size "$batch" \
              --steps "$steps" --warmup 3 --device cuda --precision "$p" --json "${fused_flag[@]}"
            [ "${STEP_PROFILE:-1}" = 1 ] && CHESSBENCH_PRODUCTS=$products CHESSBENCH_ATTENTION=$attn \
              CHESSBENCH_LAYERS=$layers CUBECL_DEVICE_THREADS=$threads run \
              "step-$name-$preset-$p-b$batch-profile" "${BURN_LIMIT:-300}" "$CB" bench-step --model "$preset" \
              --buckets "$k" --batch-size "$batch" --steps "$steps" --warmup 3 --device cuda --precision "$p" \
              --profile --json
          done
          done
          done
          done ;;
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

# The attention's own share of the 9M step (K=32, batch 1024): burn in f32
# and mixed bf16, each with the fused kernels and with burn's attention
# (`"attention"` in each row says which ran), then the PyTorch references
# on the same card (eager TF32, torch.compile amp-bf16).
part_attention() {
  STEP_IMPLS=burn STEP_ATTENTION="fused burn" STEP_PROFILE=0 step_shape 9m 32 1024 "${STEP_STEPS_9M:-20}"
  STEP_IMPLS=torch STEP_PRECISIONS=f32 step_shape 9m 32 1024 "${STEP_STEPS_9M:-20}"
  STEP_IMPLS=torchcompile STEP_PRECISIONS=bf16 step_shape 9m 32 1024 "${STEP_STEPS_9M:-20}"
}
# The fused layer norm and SwiGLU's effect on the step: burn 9M (K=32,
# batch 1024) in f32 and mixed bf16 with the fused attention, with the
# fused layers and with burn's (`"layers"` in each row says which ran).
part_layers() {
  STEP_IMPLS=burn STEP_LAYERS="fused burn" STEP_PROFILE=0 step_shape 9m 32 1024 "${STEP_STEPS_9M:-20}"
}
# The 136M SwiGLU at batch 512 has more elements than the fused kernels
# index: its rows run burn's SwiGLU (reported as mixed layers), so they
# are timed without --require-fused unless REQUIRE_FUSED=1 asks.
part_step136() {
  REQUIRE_FUSED=${REQUIRE_FUSED:-0} step_shape 136m 128 "${STEP_BATCH_136M:-512}" "${STEP_STEPS_136M:-10}"
}

# The 9M step's cost against its batch: burn (fused kernels) and PyTorch
# eager at BATCHES (128 512 1024) in BATCH_PRECISIONS (f32), then per
# implementation the line ms/step = fixed + per-sample x batch through
# them: the fixed part is what a step costs whatever its size (the host's
# work and the launches it waits on), the slope the kernels' work.
part_batches() {
  local b p
  for b in ${BATCHES:-128 512 1024}; do
    STEP_IMPLS="burn torch" STEP_PRECISIONS=${BATCH_PRECISIONS:-f32} STEP_PROFILE=0 \
      step_shape 9m 32 "$b" "${STEP_STEPS_9M:-20}"
  done
  python3 - "$RES" <<'EOF' | tee -a "$SUM"
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
series = {}
for r in rows:
    m = re.fullmatch(r"step-(burn|torch)-9m-(\w[\w-]*)-b(\d+)", r.get("run", ""))
    if m and r.get("rc") == 0 and r.get("samples_per_s"):
        ms = 1e3 * int(m[3]) / r["samples_per_s"]
        series.setdefault((m[1], m[2]), {})[int(m[3])] = ms
for (impl, p), pts in sorted(series.items()):
    xs = sorted(pts)
    line = ", ".join(f"b{x} {pts[x]:.1f} ms" for x in xs)
    if len(xs) >= 2:
        n = len(xs); mx = sum(xs) / n; my = sum(pts[x] for x in xs) / n
        slope = sum((x - mx) * (pts[x] - my) for x in xs) / sum((x - mx) ** 2 for x in xs)
        line += f"; fixed {my - slope * mx:.1f} ms/step + {1e3 * slope:.2f} us/sample"
    print(f"batches {impl} {p}: {line}")
EOF
}

# The kernel account of one 9M step (K=32, batch 1024): burn per precision,
# each with the fused attention, layer norm and SwiGLU and with burn's,
# then torch.compile
# amp-bf16 for comparison.
#
# With nsys: it records the timed steps only (bench-step brackets them with
# cuProfilerStart/Stop). Without it (the usual case): CubeCL's own profiler,
# switched on for that run by a [profiling.logger] section added to the
# cubecl.toml that setup wrote. It writes one line per kernel launch,
# "| 12.5µs     | ElemwiseFuse | CudaRuntime", and at every device sync a
# table of the launches since the last one; bench-step syncs after its
# warm-up and after its timed steps, so `--skip-syncs 1` keeps the timed
# steps (the process writes the log itself: a marker appended from here
# could not land between its phases). Each launch is timed between two
# device syncs: the run is slower than bench-step's own, every kernel's
# time includes its launch, and the cuBLASLt products (enqueued on
# CubeCL's stream by chessbench, not launched through CubeCL) are in no
# kernel's time; --wall-ms (the run's own ms per step) shows how much of
# the step that leaves out. Autotuning under the profiler times every
# candidate with those syncs and may choose (and cache) other kernels than
# an unprofiled run: on a machine whose caches have not seen this step
# (no `attention` or `step9` part before), ACCOUNT_PREWARM=1 runs one
# unprofiled step of each configuration first.
part_account() {
  local steps=${ACCOUNT_STEPS:-10} p a n log wall logs
  local args=(bench-step --model 9m --buckets 32 --batch-size 1024 --steps "$steps" --warmup 3 --device cuda
    --json)
  for p in ${ACCOUNT_PRECISIONS:-f32 bf16}; do
  for a in ${ACCOUNT_KERNELS:-fused burn}; do
    n=account-burn-9m-$p-$a-kernels
    if [ -n "${NSYS:-}" ]; then
      CHESSBENCH_ATTENTION=$a CHESSBENCH_LAYERS=$a run "$n" 300 "$NSYS" profile -t cuda --capture-range=cudaProfilerApi \
        --capture-range-end=stop --force-overwrite true -o "$W/$n" "$CB" "${args[@]}" --precision "$p"
      "$NSYS" stats -r cuda_gpu_kern_sum -f csv -o "$OUT/$n" --force-overwrite true \
        "$W/$n.nsys-rep" >>"$LOG" 2>&1 ||
        "$NSYS" stats -r gpukernsum -f csv -o "$OUT/$n" "$W/$n.nsys-rep" >>"$LOG" 2>&1
      python3 bench/kernel_account.py --nsys "$(ls "$OUT"/"$n"*.csv | head -1)" \
        --steps "$steps" --title "burn 9M $p, $a attention and layers" 2>&1 | tee "$OUT/$n.md" >>"$SUM"
    else
      [ "${ACCOUNT_PREWARM:-0}" = 1 ] && CHESSBENCH_ATTENTION=$a CHESSBENCH_LAYERS=$a run "$n-prewarm" "${ACCOUNT_LIMIT:-300}" "$CB" \
        bench-step --model 9m --buckets 32 --batch-size 1024 --steps 1 --warmup 1 --device cuda --precision "$p" --json
      log=$W/$n-cubecl.log
      rm -f "$log" # CubeCL appends
      cp "$ROOT/cubecl.toml" "$W/cubecl.toml.account"
      printf '[profiling.logger]\nlevel = "basic"\nfile = "%s"\n' "$log" >>"$ROOT/cubecl.toml"
      CHESSBENCH_ATTENTION=$a CHESSBENCH_LAYERS=$a run "$n" "${ACCOUNT_LIMIT:-300}" "$CB" "${args[@]}" --precision "$p"
      cp "$W/cubecl.toml.account" "$ROOT/cubecl.toml"
      # The run's own ms per step (profiled), from its row in results.jsonl.
      wall=$(python3 - "$RES" "$n" <<'EOF'
import json, sys
ms = ""
for line in open(sys.argv[1]):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("run") == sys.argv[2] and d.get("seconds") and d.get("bench", {}).get("steps"):
        ms = f'{1e3 * d["seconds"] / d["bench"]["steps"]:.3f}'
print(ms)
EOF
      )
      python3 bench/kernel_account.py --cubecl "$log" --skip-syncs 1 --steps "$steps" ${wall:+--wall-ms "$wall"} \
        --title "burn 9M $p, $a attention and layers, CubeCL profiler" 2>&1 | tee "$OUT/$n.md" >>"$SUM"
      logs=("$W"/account-*-cubecl.log)
      [ -f "${logs[0]}" ] && tar -czf "$OUT/account-cubecl-logs.tar.gz" -C "$W" "${logs[@]##*/}"
    fi
  done
  done
  run "account-torchcompile-9m-amp-bf16" 200 python3 bench/torch_reference.py --preset 9m --buckets 32 \
    --batch 1024 --steps "$steps" --warmup 5 --device cuda --precision amp-bf16 --compile \
    --profile-out "$OUT/account-torchcompile-9m-amp-bf16.csv"
  python3 bench/kernel_account.py --torch "$OUT/account-torchcompile-9m-amp-bf16.csv" \
    --steps "$steps" --title "torch.compile 9M amp-bf16" 2>&1 |
    tee "$OUT/account-torchcompile-9m-amp-bf16.md" >>"$SUM"
}

setup
for part in "$@"; do
  case "$part" in
    check | jit | train | curves | eval | loader | evalbench | evalpaper | step9 | attention | layers | batches | step136 | account) "part_$part" ;;
    *) echo "unknown part $part (jit check step9 attention layers batches account step136 curves train eval loader evalbench evalpaper)" >&2; exit 2 ;;
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
verdicts, fallbacks = {}, {}
for r in rows:
    if "samples_per_s" in r:
        k = r.get("ran")
        ran = f'{k["products"]} products, {k["attention"]} attention, {k["layers"]} layers' if k else ""
        print(f'{r["run"]:<40} {r["samples_per_s"]:>10.0f} samples/s {r.get("model_flops_per_s", 0) / 1e12:>7.1f} TFLOP/s {ran}')
    for v in r.get("kernel_variants", []):
        verdicts.setdefault(v, r["run"])
    for f in r.get("fallbacks", []):
        fallbacks.setdefault(f, r["run"])
print("commit " + (", ".join(sorted({r["commit"] for r in rows if "commit" in r})) or "?"))
print("== fused kernels' verdicts (the first run that reported each)")
for v, run in sorted(verdicts.items()):
    print(f"  {v}  [{run}]")
print("== fallbacks to burn's operations" + ("" if fallbacks else ": none"))
for f, run in sorted(fallbacks.items()):
    print(f"  {f}  [{run}]")
EOF
if [ ${#FAILED[@]} -gt 0 ]; then
  say "== ${#FAILED[@]} run(s) failed:"
  for f in "${FAILED[@]}"; do say "  $f"; done
  exit 1
fi
