# chessbench: `make` runs the demo pipeline, `make test` runs the tests.
#
# Stage targets depend on real files: the binary on the sources, each stage's
# manifest on the binary and its pipeline config, so `make` redoes only what
# changed.

CARGO       ?= cargo
TARGET_DIR  ?= $(or $(CARGO_TARGET_DIR),target)
BIN         := $(TARGET_DIR)/release/chessbench
SOURCES     := Cargo.toml Cargo.lock $(shell find src -name '*.rs')
PIPELINE    ?= pipeline/demo.toml
RUN         ?= runs/demo
FUZZ_CASES  ?= 20000

.PHONY: all build ingest annotate plan stats test lint unit fuzz fuzz-smoke bench \
        bench-ingest bench-annotate test-slurm stockfish doc clean

# Root for apt-get (CI runs as root; elsewhere sudo).
AS_ROOT     := $(if $(filter 0,$(shell id -u)),,sudo)

## Demo pipeline (as far as it exists): ingest, annotate, print Table A1.
all: annotate stats

build: $(BIN)

$(BIN): $(SOURCES)
	$(CARGO) build --release --locked
	@touch $@

$(RUN)/manifest.json: $(BIN) $(PIPELINE)
	$(BIN) ingest --config $(PIPELINE) --out $(RUN)

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

## What annotating the demo costs, and the paper's set at the same rate.
plan: $(RUN)/manifest.json | stockfish
	$(BIN) annotate --config $(PIPELINE) $(RUN) --plan

stats: $(RUN)/manifest.json
	$(BIN) stats $(RUN)

## Tests: formatting, clippy, unit + integration tests, a fuzz smoke run.
test: lint unit fuzz-smoke

# The annotate tests run the real Stockfish (they skip without one).
unit: | stockfish

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

unit:
	$(CARGO) test --locked

fuzz-smoke:
	PROPTEST_CASES=64 $(CARGO) test --locked --test it fuzz

## Long fuzz run of the ingest path (proptest: random bytes, mutated PGN).
fuzz:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release --locked --test it fuzz -- --nocapture

## Benchmarks: ingest throughput vs zstd -dc and pgn-reader's
## parallel_validate; annotate engine utilisation, bytes per record, MultiPV.
bench: bench-ingest bench-annotate

bench-ingest:
	$(CARGO) bench --locked --bench ingest

bench-annotate: | stockfish
	$(CARGO) bench --locked --bench annotate

## A real single-node Slurm cluster (slurm-wlm, munge; needs root): a 4-task
## job array must equal an unsharded run. Not part of `make test`, see README.
SLURM_BIN   ?= $(BIN)
test-slurm: | stockfish
	@[ -x "$(SLURM_BIN)" ] || $(MAKE) build
	CHESSBENCH_BIN=$(abspath $(SLURM_BIN)) REQUIRE_SLURM=$(or $(REQUIRE_SLURM),1) tests/slurm/run.sh

doc:
	$(CARGO) doc --no-deps

clean:
	rm -rf runs
