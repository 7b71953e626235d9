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

.PHONY: all build ingest stats test lint unit fuzz fuzz-smoke bench doc clean

## Demo pipeline (as far as it exists): ingest, then print Table A1.
all: stats

build: $(BIN)

$(BIN): $(SOURCES)
	$(CARGO) build --release --locked
	@touch $@

$(RUN)/manifest.json: $(BIN) $(PIPELINE)
	$(BIN) ingest --config $(PIPELINE) --out $(RUN)

ingest: $(RUN)/manifest.json

stats: $(RUN)/manifest.json
	$(BIN) stats $(RUN)

## Tests: formatting, clippy, unit + integration tests, a fuzz smoke run.
test: lint unit fuzz-smoke

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

## Throughput vs zstd -dc and pgn-reader's parallel_validate; bytes/record.
bench:
	$(CARGO) bench --locked --bench ingest

doc:
	$(CARGO) doc --no-deps

clean:
	rm -rf runs
