# chessbench: `make` runs the demo pipeline, `make test` runs the tests.
#
# Stage targets depend on real files: each stage's manifest on the binary and
# its pipeline config, the binary on cargo (which rebuilds it only when a
# source changed), so `make` redoes only what changed.

CARGO       ?= cargo
TARGET_DIR  ?= $(or $(CARGO_TARGET_DIR),target)
# The optimised binary `make` builds and the stages run; BIN=... runs them
# with another (CI uses TEST_BIN, below).
RELEASE_BIN := $(TARGET_DIR)/release/chessbench
BIN         := $(RELEASE_BIN)
# DuckDB's prebuilt shared library (npm registry), linked by the duckdb crate.
DUCKDB_LIB  := .duckdb/1.5.6/libduckdb.so
PYTHON      ?= python3
PIPELINE    ?= pipeline/demo.toml
RUN         ?= runs/demo
# The longer demo: more annotated boards and training steps. The benchmarks,
# the parity checks and the GPU bundle use its run.
LONG_PIPELINE := pipeline/demo-long.toml
LONG_RUN    := runs/demo-long
BENCH_RUN   ?= $(LONG_RUN)
# What makes BENCH_RUN annotated: the long demo, or the default pipeline's run.
BENCH_READY := $(if $(filter $(LONG_RUN),$(BENCH_RUN)),long-annotated,$(BENCH_RUN)/annotate/.done)
FUZZ_CASES  ?= 20000

.PHONY: FORCE all prerequisites demo-long long-annotated ablations docs test-docs build ingest annotate train eval plan stats notebooks python-deps duckdb test lint build-tests unit \
        fuzz fuzz-smoke bench bench-ingest bench-annotate bench-sql bench-loader bench-train bench-eval bench-evals bench-scale bench-cores \
        test-slurm test-cluster test-k8s test-spark test-demo test-python test-searchless-loader test-published jax-deps parity parity-paired check-cuda test-kernels test-wgpu wgpu-autotune-seed bench-wgpu bench-account bench-host bench-host-profile bench-nvrtc test-cuda gpu-bundle stockfish doc clean

# Root for apt-get (CI runs as root; elsewhere sudo).
AS_ROOT     := $(if $(filter 0,$(shell id -u)),,sudo)

## The demo pipeline (pipeline/demo.toml -> runs/demo): ingest, annotate,
## train the tiny action-value model, evaluate it, print Table A1, execute the
## notebooks into HTML. The notebooks' Python packages and Stockfish are
## installed while the binary builds (on a new machine pip takes about 40 s
## of the first `make`); the stages then run one after another.
all:
	@$(MAKE) --no-print-directory -j2 build prerequisites
	@$(MAKE) --no-print-directory annotate train eval stats notebooks

# Best effort beside the build: a failure here is met again, and reported,
# by the stage that needs the package (annotate, notebooks).
prerequisites:
	-@$(MAKE) --no-print-directory python-deps stockfish

## The longer demo (pipeline/demo-long.toml -> runs/demo-long), every stage.
demo-long:
	$(MAKE) all PIPELINE=$(LONG_PIPELINE) RUN=$(LONG_RUN)

long-annotated:
	$(MAKE) annotate PIPELINE=$(LONG_PIPELINE) RUN=$(LONG_RUN)

## The paper's ablations at demo scale (pipeline/ablations.toml, which says
## how many training runs and how long): the runs on the demo's annotated
## boards, then RUN/ablate/ablations/report.md. Resumes when started again. The report is
## written even when a variant failed (it lists the failures; make fails).
ablations: $(BIN) $(RUN)/annotate/.done
	status=0; $(BIN) ablate pipeline/ablations.toml $(RUN) || status=$$?; \
	$(BIN) ablate pipeline/ablations.toml $(RUN) --report && exit $$status

## docs/cli.md: every command's --help, generated from the code; the
## current figures of docs/benchmarks.md, from bench/results/*/figures.jsonl.
docs: $(BIN)
	$(BIN) help-markdown > docs/cli.md
	python3 bench/figures.py --write

## Runs the shell blocks of README.md and docs/*.md against a copy of the
## evaluated demo run (scripts/doc-test); lists the blocks marked not run.
test-docs: $(RUN)/report/eval.json
	$(PYTHON) scripts/doc-test --bin $(BIN) --run $(RUN)

build: $(BIN)

# Cargo decides whether the binary is out of date, and is asked every time:
# it rebuilds only when a source changed, and otherwise puts its optimised
# binary back in place (a test build links its own binary at the same path,
# see TEST_CARGO) with the time it was built, so the stages after it are
# redone only when it changed. Cargo runs as many compilers as there are
# cores, not the share of a `make -j` job server it would otherwise take.
$(RELEASE_BIN): FORCE | $(DUCKDB_LIB)
	MAKEFLAGS= MFLAGS= $(CARGO) build --release --locked

FORCE:

## DuckDB 1.5.6's libduckdb.so from the npm registry (checksum pinned), so
## the duckdb crate links it instead of compiling DuckDB (20+ minutes).
duckdb: $(DUCKDB_LIB)

$(DUCKDB_LIB): scripts/fetch-libduckdb
	scripts/fetch-libduckdb
	@touch $@

$(RUN)/manifest.json: $(BIN) $(PIPELINE)
	$(BIN) ingest --config $(PIPELINE) $(RUN)

ingest: $(RUN)/manifest.json

## Stockfish from Debian's package, unless one is installed already.
stockfish:
	@command -v stockfish >/dev/null || [ -x /usr/games/stockfish ] || { \
	  echo "installing Debian's stockfish package"; \
	  $(AS_ROOT) apt-get install -y -qq stockfish; }

# Annotation is resumable: re-running continues where it stopped.
$(RUN)/annotate/.done: $(BIN) $(PIPELINE) $(RUN)/manifest.json | stockfish
	$(BIN) annotate --config $(PIPELINE) $(RUN)
	@touch $@

annotate: $(RUN)/annotate/.done

# Training resumes from its newest checkpoint; summary.json is written last.
TRAIN_NAME  ?= av_tiny
$(RUN)/train/$(TRAIN_NAME)/summary.json: $(BIN) $(PIPELINE) $(RUN)/annotate/.done
	$(BIN) train --config $(PIPELINE) $(RUN)

## The [train] recipe of $(PIPELINE) on the annotated demo run (CPU).
train: $(RUN)/train/$(TRAIN_NAME)/summary.json

## Score the trained model ([eval] of $(PIPELINE)): metrics, puzzles, games,
## Elo; writes $(RUN)/report/eval.{json,md} + CSV/PGN, then the plots
## (notebooks/eval.ipynb -> $(RUN)/report/*.png, eval.html).
EVAL_JSON   := $(RUN)/report/eval.json
$(EVAL_JSON): $(BIN) $(PIPELINE) $(RUN)/train/$(TRAIN_NAME)/summary.json
	$(BIN) eval --config $(PIPELINE) $(RUN) --checkpoint $(RUN)/train/$(TRAIN_NAME) --out $(RUN)/report

eval: $(RUN)/report/eval.html
	@echo "report: $(RUN)/report/eval.md (plots: $(RUN)/report/*.png)"

$(RUN)/report/eval.html: $(EVAL_JSON)

## What annotating the demo costs, and the paper's set at the same rate.
plan: $(RUN)/manifest.json | stockfish
	$(BIN) annotate --config $(PIPELINE) $(RUN) --plan

## Table A1 of the demo run, by the SQL layer (sql/table_a1.sql).
stats: $(RUN)/manifest.json
	$(BIN) sql $(RUN) table_a1
	$(BIN) sql $(RUN) overlap --only overlap --quiet

## Python packages of the notebooks and the Python interop tests.
python-deps:
	@$(PYTHON) -c "import duckdb, polars, pyarrow, matplotlib, nbconvert, ipykernel, apache_beam" 2>/dev/null || \
	  $(PYTHON) -m pip install --quiet --disable-pip-version-check -r notebooks/requirements.txt

## Execute the notebooks against the demo run: $(RUN)/report/*.html.
NOTEBOOKS   := $(wildcard notebooks/*.ipynb)
notebooks: $(patsubst notebooks/%.ipynb,$(RUN)/report/%.html,$(NOTEBOOKS))

$(RUN)/report/%.html: notebooks/%.ipynb notebooks/cbsql.py $(wildcard sql/*.sql) $(RUN)/annotate/.done $(RUN)/train/$(TRAIN_NAME)/summary.json | python-deps
	cd notebooks && CHESSBENCH_RUN=$(abspath $(RUN)) $(PYTHON) -m jupyter nbconvert --to html --execute $*.ipynb \
	  --output-dir $(abspath $(RUN))/report --ExecutePreprocessor.timeout=1200

## Tests: formatting, clippy, unit + integration tests, a fuzz smoke run.
test: lint unit fuzz-smoke

# The test build (docs/architecture.md, "One build of each crate"). It
# uses the release profile, so it reuses every dependency `make` compiled
# (scripts/feature-parity checks that nothing compiles twice), with
# chessbench's own code at opt-level 1 and with debug assertions and
# overflow checks (.cargo/test.toml). Clippy lints chessbench's own code as
# it compiles (clippy-driver as the workspace's compiler wrapper, denying
# warnings, as `cargo clippy -- -D warnings` does), so the lint needs no
# second, check-mode build of every dependency. Every cargo command that
# builds tests goes through TEST_CARGO: another wrapper or configuration
# would compile chessbench's units again.
TEST_CONFIG := $(abspath .cargo/test.toml)
CLIPPY_DRIVER := $(shell rustc --print sysroot 2>/dev/null)/bin/clippy-driver
DENY_WARNINGS := -D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
TEST_ENV    := RUSTC_WORKSPACE_WRAPPER=$(CLIPPY_DRIVER) CLIPPY_ARGS=$(DENY_WARNINGS)
TEST_CARGO  := $(TEST_ENV) $(CARGO) --config $(TEST_CONFIG)
TEST_FLAGS  := --release --locked
# The test build's binary, kept apart from RELEASE_BIN (which the test
# build's link replaces until `make` puts the optimised one back): CI runs
# the demo and the cluster, Python and documentation tests with it.
TEST_BIN    := $(TARGET_DIR)/test/chessbench

# The annotate tests run the real Stockfish (they skip without one).
build-tests unit: | stockfish $(DUCKDB_LIB)
lint fuzz fuzz-smoke doc: | $(DUCKDB_LIB)

# Formatting; that the test build shares every crate with `make`'s build
# (scripts/feature-parity: cargo's resolved features, nothing compiled); and
# that the test build's lint denies a warning (a change in how clippy-driver
# takes its arguments would otherwise let every warning through unnoticed).
lint:
	$(CARGO) fmt --all --check
	scripts/feature-parity
	@[ -x "$(CLIPPY_DRIVER)" ] || { echo "lint: no clippy-driver at $(CLIPPY_DRIVER): rustup component add clippy"; exit 1; }
	@mkdir -p $(TARGET_DIR) && printf 'pub fn f(v: &Vec<u8>) -> usize { v.len() }\n' > $(TARGET_DIR)/lint-probe.rs
	@if CLIPPY_ARGS=$(DENY_WARNINGS) $(CLIPPY_DRIVER) rustc --edition 2024 --crate-type lib --emit metadata \
	  -o $(TARGET_DIR)/lint-probe.rmeta $(TARGET_DIR)/lint-probe.rs 2>/dev/null; then \
	  echo "lint: clippy-driver let a warning through (TEST_ENV no longer denies warnings)"; exit 1; fi

# Every target (the library, its unit tests, the binary, the integration
# tests and the benchmarks), compiled and linted; then the test build's
# binary linked to TEST_BIN.
build-tests:
	$(TEST_CARGO) test $(TEST_FLAGS) --no-run --all-targets
	@mkdir -p $(dir $(TEST_BIN))
	ln -f $(RELEASE_BIN) $(TEST_BIN)

# The fuzz properties (tests/it/fuzz.rs) run once, in fuzz-smoke.
unit: build-tests
	$(TEST_CARGO) test $(TEST_FLAGS) -- --skip fuzz::

# Proptest's default 256 cases a property (a tenth of them for the whole
# pipeline): about 10 s. `make fuzz` runs many more.
fuzz-smoke:
	PROPTEST_CASES=256 $(TEST_CARGO) test $(TEST_FLAGS) --test it fuzz

## The Python package (python/, docs/python.md): built with pip into a
## fresh virtual environment (over the system's site-packages: torch,
## duckdb, pyarrow, polars), in the test build's layout so it reuses the
## crates `make` and `make test` compiled (scripts/feature-parity fails if it
## would not) and clippy lints it as it compiles; its tests on the demo run,
## then tests/it/python.rs: its batches are the trainer's, bit for bit.
PY_VENV     ?= $(TARGET_DIR)/python-venv
# The release build of the package, for bench-loader.
PY_BENCH_VENV ?= $(TARGET_DIR)/python-venv-release
test-python: $(RUN)/annotate/.done | $(DUCKDB_LIB)
	$(TEST_ENV) scripts/feature-parity --python --config $(TEST_CONFIG)
	rm -rf $(PY_VENV)
	$(PYTHON) -m venv --system-site-packages $(PY_VENV)
	$(TEST_ENV) MATURIN_PEP517_ARGS="--profile release --config $(TEST_CONFIG)" \
	  $(PY_VENV)/bin/pip install --quiet --disable-pip-version-check ./python
	CHESSBENCH_RUN=$(abspath $(RUN)) CHESSBENCH_BIN=$(abspath $(BIN)) \
	  $(PY_VENV)/bin/python -m unittest discover -s python/tests -v
	CHESSBENCH_PYTHON=$(abspath $(PY_VENV))/bin/python $(TEST_CARGO) test $(TEST_FLAGS) --test it python:: -- --nocapture

## The package's loader against searchless_chess's own (their grain
## pipeline over a `bag export` of the demo run's train split): the same
## records, dtypes and loss masks for the three policies. Needs their
## checkout and `make jax-deps`, as test-published does.
test-searchless-loader: $(RUN)/annotate/.done
	@test -n "$(SEARCHLESS_CHESS)" || { echo "set SEARCHLESS_CHESS=DIR (a google-deepmind/searchless_chess checkout)"; exit 1; }
	$(abspath $(PY_VENV))/bin/python tests/python/test_searchless_loader.py $(BIN) $(RUN) \
	  --searchless $(abspath $(SEARCHLESS_CHESS)) --jax-python $(JAX_PYTHON)

## Long fuzz run of the ingest path (proptest: random bytes, mutated PGN).
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(TEST_CARGO) test $(TEST_FLAGS) --test it fuzz -- --nocapture

## Benchmarks: ingest throughput vs zstd -dc and pgn-reader's
## parallel_validate; annotate engine utilisation, bytes per record, MultiPV.
bench: bench-ingest bench-annotate bench-sql bench-loader bench-train bench-eval

bench-ingest: | $(DUCKDB_LIB)
	$(CARGO) bench --locked --bench ingest

bench-annotate: | stockfish $(DUCKDB_LIB)
	$(CARGO) bench --locked --bench annotate

## Table A1 query time (SQL vs the Rust stats) and Parquet vs .bag bytes per
## record of each ChessBench set, on the long demo run (or BENCH_RUN=...).
bench-sql: $(BENCH_READY) | $(DUCKDB_LIB)
	CHESSBENCH_BENCH_RUN=$(abspath $(BENCH_RUN)) $(CARGO) bench --locked --bench sql

## Training-data loader samples/s (per worker thread) on the long demo run.
bench-loader: $(BENCH_READY) | $(DUCKDB_LIB)
	$(PYTHON) -m venv --system-site-packages $(PY_BENCH_VENV)
	$(PY_BENCH_VENV)/bin/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./python
	CHESSBENCH_PYTHON=$(abspath $(PY_BENCH_VENV))/bin/python CHESSBENCH_BENCH_RUN=$(abspath $(BENCH_RUN)) \
	  $(CARGO) bench --locked --bench loader

## Trainer steps/s and model FLOPs per second (burn on CPU) against the same
## arithmetic as plain matrix multiplications, on the demo run.
# BENCH_DEVICE=cuda measures on GPU 0 (builds with --features cuda).
BENCH_DEVICE ?= cpu
bench-eval: | $(DUCKDB_LIB)
	BENCH_DEVICE=$(BENCH_DEVICE) $(if $(SEARCHLESS_CHESS),SEARCHLESS_CHESS=$(abspath $(SEARCHLESS_CHESS)) CHESSBENCH_JAX_PYTHON=$(JAX_PYTHON)) $(CARGO) bench --locked --bench eval $(if $(filter cuda,$(BENCH_DEVICE)),--features cuda)

## One core streaming the Lichess evaluation database (synthetic,
## Lichess-shaped lines): lines/s against decompression alone, peak RSS.
bench-evals: | $(DUCKDB_LIB)
	$(CARGO) bench --locked --bench evals

## Every stage at SCALE_GAMES/10 and SCALE_GAMES generated games (default
## 10^5): wall time, records/s, peak RSS, disk, the 10x ratio (benches/scale.rs).
## SCALE_STAGES picks stages, SCALE_REPEAT=R keeps ingest's median of R runs.
SCALE_GAMES ?= 100000
bench-scale: | $(DUCKDB_LIB)
	SCALE_GAMES=$(SCALE_GAMES) $(CARGO) bench --locked --bench scale

## How ingest and the bag stages scale with cores: each at -j 1, 4 and 16
## (those up to the cores, and the cores) beside parallel_validate, with wall
## and CPU time, speed-up over -j 1 and peak RSS, then the evaluation-database
## reader at one thread and every core (bench/cores.py); results in
## bench-data/cores/. Generated games: CORES_GAMES (10^6) for ingest,
## CORES_BAG_GAMES (10^5, synthetic values) for the bag stages. CORES_JOBS
## overrides the -j list. On a machine without Rust: bench/cores.sh with
## scripts/cores-bundle's .cores/.
CORES_GAMES     ?= 1000000
CORES_BAG_GAMES ?= 100000
bench-cores: | $(DUCKDB_LIB)
	scripts/cores-build target/cores-bin
	python3 bench/cores.py --bin target/cores-bin \
	  --out bench-data/cores --work bench-data/cores/work --games $(CORES_GAMES) \
	  --bag-games $(CORES_BAG_GAMES) $(if $(CORES_JOBS),--jobs "$(CORES_JOBS)")

bench-train: $(BENCH_READY) | $(DUCKDB_LIB)
	CHESSBENCH_BENCH_RUN=$(abspath $(BENCH_RUN)) $(CARGO) bench --locked --bench train

## Checks on the trained demo run: the action-value model's test log-loss
## beats the predict-the-marginal baseline.
test-demo: $(RUN)/train/$(TRAIN_NAME)/summary.json
	CHESSBENCH_DEMO_RUN=$(abspath $(RUN)) $(TEST_CARGO) test $(TEST_FLAGS) --test it train::demo_ -- --ignored --nocapture

## searchless_chess's own code as the reference. Their code is
## not vendored: SEARCHLESS_CHESS names a checkout of
## google-deepmind/searchless_chess (tested at 90ae0e6); JAX_PYTHON a
## Python with their dependencies (`make jax-deps` makes .venv-jax, on the order of a gigabyte).
SEARCHLESS_CHESS ?=
JAX_PYTHON  ?= $(abspath .venv-jax/bin/python)
JAX_PINS    := jax[cpu]==0.10.2 dm-haiku==0.0.17 optax==0.2.8 chex==0.1.92 \
               grain==0.2.18 orbax-checkpoint==0.12.8 jaxtyping==0.3.11 \
               etils==1.15.0 zstandard==0.25.0 chess==1.11.2 apache-beam==2.77.0

jax-deps:
	$(PYTHON) -m venv --system-site-packages .venv-jax
	.venv-jax/bin/pip install -q $(JAX_PINS)

## Their model's forward pass (tiny and 9M, every policy) and 30 of their
## training steps against chessbench's, from the same parameters; Orbax
## checkpoints their code saves, converted (scripts/orbax_to_safetensors.py),
## imported and played against their engines on 1,000 positions.
test-published: | $(DUCKDB_LIB) stockfish
	REQUIRE_PUBLISHED=1 SEARCHLESS_CHESS=$(SEARCHLESS_CHESS) CHESSBENCH_JAX_PYTHON=$(JAX_PYTHON) \
	  $(TEST_CARGO) test $(TEST_FLAGS) --test it published -- --nocapture

## Learning parity on the demo run: their training and ours, same recipe,
## test log-loss per seed (SEEDS="0 1").
SEEDS       ?= 0 1
parity: $(BENCH_READY)
	bench/parity.sh $(BENCH_RUN) $(SEARCHLESS_CHESS) $(JAX_PYTHON) $(SEEDS)

## Learning parity on paired runs: chessbench trains from their initial
## parameters on their batches in their order (benches/parity_paired.rs).
parity-paired: $(BENCH_READY) | $(DUCKDB_LIB)
	CHESSBENCH_BENCH_RUN=$(abspath $(BENCH_RUN)) SEARCHLESS_CHESS=$(abspath $(SEARCHLESS_CHESS)) \
	  CHESSBENCH_JAX_PYTHON=$(JAX_PYTHON) SEEDS="$(SEEDS)" $(CARGO) bench --locked --bench parity_paired

# The GPU backends, built together once for the checks below (one feature
# set, one build): CUDA (compiled, its kernels run on the CPU as C++) and
# wgpu (run on Mesa's lavapipe).
GPU_FEATURES := cuda,wgpu
# The test build's layout (TEST_CARGO: the release profile's dependencies,
# shared with `make test` wherever the GPU features leave a crate as it is),
# with chessbench's own code unoptimised: with both backends the compiler
# instantiates the model, training and evaluation for each, and optimising
# that took about 11 minutes of the build on 2 cores, against 2 unoptimised;
# the checks below then run about 2 minutes longer. Release builds
# (test-cuda, gpu-bundle) are optimised as always.
GPU_CARGO   := $(TEST_CARGO) --config 'profile.release.package.chessbench.opt-level=0'

## The GPU builds compile: the library, the binary, the library's tests and
## the GPU test targets (tests/cuda.rs, tests/wgpu.rs) with both backends (no
## GPU needed to build). A build, not a check: test-kernels and test-wgpu
## then reuse it. The CPU integration tests (tests/it) run in `make test`'s
## build without GPU features.
check-cuda: | $(DUCKDB_LIB)
	$(GPU_CARGO) test $(TEST_FLAGS) --no-run --features $(GPU_FEATURES) --lib --test cuda --test wgpu

## The project's GPU kernels (fused attention, layer norm, SwiGLU) as
## CubeCL compiles them for CUDA, run on the CPU as C++ under a model of
## CUDA's memory layouts and launch (no GPU needed; g++, ThreadSanitizer):
## src/model/gpu/cuda_emulator.rs, docs/gpu.md.
test-kernels: | $(DUCKDB_LIB)
	$(GPU_CARGO) test $(TEST_FLAGS) --features $(GPU_FEATURES) --lib -- --nocapture \
	  model::gpu::attention::emulated model::gpu::layers::emulated model::gpu::flat::emulated model::gpu::cuda_emulator model::gpu::cache

# Mesa's loader warns on every start without a runtime directory. The
# tests keep their kernel cache in the target directory, started from the
# autotune seed (tests/wgpu-autotune/, `make wgpu-autotune-seed`): without
# it a new machine compiles and times every candidate kernel of each shape
# burn autotunes, about 7 minutes of the tests on 2 cores, and each run
# could pick other kernels. Shapes the seed lacks are tuned as usual.
WGPU_KERNELS ?= $(TARGET_DIR)/wgpu-test-kernels
WGPU_SEED   ?= tests/wgpu-autotune
WGPU_ENV    := XDG_RUNTIME_DIR=$${XDG_RUNTIME_DIR:-/tmp} CHESSBENCH_KERNEL_CACHE=$(abspath $(WGPU_KERNELS))

## The GPU code through a real GPU runtime without a GPU: burn's wgpu
## backend on Mesa's lavapipe (software Vulkan; Debian's
## mesa-vulkan-drivers, which `.ci/run` installs), or on the machine's GPU.
## The library's tests (src/model/gpu/wgpu.rs): every project kernel variant
## against its CPU twin (f32, f16; dense and as the blocks' views;
## sequences 78, 79; head dimensions 16, 32, 64), the tiny model trained
## 20 steps against the CPU with the fused kernels and with burn's; then
## the binary (tests/wgpu.rs) on the trained demo run: evaluation and UCI
## scores against the CPU's, training and the kernel count.
test-wgpu: $(RUN)/train/$(TRAIN_NAME)/summary.json | $(DUCKDB_LIB)
	mkdir -p $(WGPU_KERNELS)/autotune
	$(if $(WGPU_SEED),cp -rn $(WGPU_SEED)/. $(WGPU_KERNELS)/autotune/)
	$(WGPU_ENV) $(GPU_CARGO) test $(TEST_FLAGS) --features $(GPU_FEATURES) --lib model::gpu::wgpu -- --test-threads=2
	$(WGPU_ENV) CHESSBENCH_DEMO_RUN=$(abspath $(RUN)) $(GPU_CARGO) test $(TEST_FLAGS) --features $(GPU_FEATURES) --test wgpu -- --test-threads=1

## test-wgpu from an empty kernel cache, then its autotune results written
## as the seed test-wgpu starts from (tests/wgpu-autotune/, without the
## timings): after a change of the shapes the tests run, or of burn.
wgpu-autotune-seed: $(RUN)/train/$(TRAIN_NAME)/summary.json | $(DUCKDB_LIB)
	rm -rf $(WGPU_KERNELS).seed
	$(MAKE) test-wgpu WGPU_KERNELS=$(WGPU_KERNELS).seed WGPU_SEED=
	scripts/wgpu-autotune-seed $(WGPU_KERNELS).seed tests/wgpu-autotune

## The kernels a training step launches after fusion, and those a cold
## process compiles, on wgpu (lavapipe without a GPU): tiny and 9M, the
## fused kernels against burn's, f32, beside the operations before fusion
## (bench/wgpu_kernels.sh); rows in bench-data/wgpu/kernels.jsonl.
bench-wgpu: | $(DUCKDB_LIB)
	$(GPU_CARGO) build $(TEST_FLAGS) --features $(GPU_FEATURES) --bin chessbench
	bench/wgpu_kernels.sh $(TARGET_DIR)/release/chessbench bench-data/wgpu

## The 9M step's account without a GPU: every kernel burn launches after
## fusion (wgpu on lavapipe) with the bytes it moves, beside PyTorch eager's
## operators (on the CPU; needs torch), extrapolated to batch 1,024, with an
## H100 roofline (bench/step_account.py; about 15 minutes on 2 cores).
bench-account: | $(DUCKDB_LIB)
	$(GPU_CARGO) build $(TEST_FLAGS) --features $(GPU_FEATURES) --bin chessbench
	python3 bench/step_account.py run $(TARGET_DIR)/release/chessbench bench-data/account

## The training step's host cost without a GPU (bench/host_cost.py; needs
## torch, about 15 minutes on 2 cores after the build): the CPU time of the
## thread that runs burn's step on lavapipe with burn-fusion's and CubeCL's
## services inline on it (CUBECL_DEVICE_THREADS=0: autodiff, fusion,
## CubeCL's launches, wgpu's encoding), per step and per operation, for the
## tiny and 9M models in f32 and mixed precision, beside PyTorch eager's
## host on the meta device, and what the default runner threads cost. Built optimised, as a user's GPU binary is: chessbench's
## generic code instantiates burn's stack, so an unoptimised build would time
## the compiler's settings, not the stack. `bench-host-profile` adds a perf
## profile of the host thread by layer (needs Debian's linux-perf).
bench-host: | $(DUCKDB_LIB)
	$(CARGO) build --release --locked --features $(GPU_FEATURES) --bin chessbench
	python3 bench/host_cost.py run $(RELEASE_BIN) bench-data/host
	python3 bench/host_cost.py render bench-data/host

bench-host-profile: | $(DUCKDB_LIB)
	$(CARGO) build --release --locked --features $(GPU_FEATURES) --bin chessbench
	python3 bench/host_cost.py profile $(RELEASE_BIN) bench-data/host

## NVRTC's compile time for the project's kernel variants the 9M step runs
## on CUDA, on the CPU (no GPU; needs the nvidia-cuda-nvrtc and
## nvidia-cuda-runtime wheels): to the CUBIN chessbench loads and to PTX
## only (bench/nvrtc_compile.py); a regression check of the cold start.
bench-nvrtc: | $(DUCKDB_LIB)
	rm -rf bench-data/nvrtc
	CHESSBENCH_NVRTC_DUMP=$(abspath bench-data/nvrtc) $(GPU_CARGO) test $(TEST_FLAGS) --features $(GPU_FEATURES) \
	  --lib the_nine_million_steps_variants_are_cuda_c
	python3 bench/nvrtc_compile.py bench-data/nvrtc

## On a machine with an NVIDIA GPU and Rust: the CUDA test (one training
## step on CUDA against the CPU, tests/cuda.rs).
test-cuda: | $(DUCKDB_LIB)
	$(CARGO) test --release --locked --features cuda --test cuda -- --nocapture --test-threads=1

## For a GPU machine without Rust: the CUDA binaries, the
## annotated demo run, searchless_chess's src/ and two wheels, packed into
## .gpu/ for bench/gpu.sh (needs SEARCHLESS_CHESS=checkout).
gpu-bundle: $(BENCH_READY) | $(DUCKDB_LIB)
	scripts/gpu-bundle $(SEARCHLESS_CHESS) $(BENCH_RUN)

## A real single-node Slurm cluster (slurm-wlm, munge; needs root): a 4-task
## job array must equal an unsharded run, and an ablation grid runs as
## arrays. For machines without network namespaces; test-cluster covers
## the same and the faults. Not part of `make test`, see README.
SLURM_BIN   ?= $(BIN)
test-slurm: | stockfish
	@[ -x "$(SLURM_BIN)" ] || $(MAKE) build
	CHESSBENCH_BIN=$(abspath $(SLURM_BIN)) REQUIRE_SLURM=$(or $(REQUIRE_SLURM),1) tests/slurm/run.sh

## Slurm on three nodes, each in a network namespace of its own
## (tests/slurm/cluster.sh, root), under faults (tests/slurm/faults.sh): a
## node killed mid-array, tasks killed inside a chunk's commit, one array
## submitted twice and one of another size beside it, an engine that dies
## on one board, an ablation grid whose training node is killed; each ends
## equal to one unsharded process. About 3.5 minutes on 2 cores.
test-cluster: | stockfish
	@[ -x "$(SLURM_BIN)" ] || $(MAKE) build
	CHESSBENCH_BIN=$(abspath $(SLURM_BIN)) REQUIRE_SLURM=$(or $(REQUIRE_SLURM),1) tests/slurm/faults.sh

## The Kubernetes manifests (pipeline/k8s/*.yaml) without a cluster
## (tests/k8s/run.sh): strict schema validation against Kubernetes 1.29 to
## the newest version kubernetes-validate bundles, the API server's rules
## the schema lacks, then each Job's pods run as the kubelet would start
## them (JOB_COMPLETION_INDEX, $$(VAR) expansion, resource fields): the
## annotate Job must equal an unsharded annotate, the ablation Jobs an
## unsharded ablate. About 30 s on 2 cores, plus ~15 s once for the venv.
K8S_VENV    ?= $(TARGET_DIR)/k8s-venv
test-k8s: | stockfish
	@[ -x "$(BIN)" ] || $(MAKE) build
	CHESSBENCH_BIN=$(abspath $(BIN)) K8S_VENV=$(abspath $(K8S_VENV)) tests/k8s/run.sh

## Table A1 by Spark SQL (pipeline/spark/table_a1.py: Spark in local mode, a
## real JVM) against `chessbench sql RUN table_a1`, every row and column: on
## RUN, on a copy with evaluation-database files and a commit in progress,
## and on a copy caught between a commit and its renames
## (tests/spark/run.sh). Needs Java 17 or 21; installs pyspark
## (tests/spark/requirements.txt, ~500 MB) into SPARK_VENV.
SPARK_VENV  ?= $(TARGET_DIR)/spark-venv
test-spark: $(RUN)/annotate/.done
	SPARK_VENV=$(abspath $(SPARK_VENV)) tests/spark/run.sh $(RUN) $(BIN)

doc:
	$(CARGO) doc --no-deps

clean:
	rm -rf runs
