#!/usr/bin/env bash
# bench/cores.py on a many-core machine without Rust: the binaries come
# prebuilt in .cores/ (scripts/cores-bundle). Results go to $OUT
# (cores.jsonl, one line a run, written as each run ends; cores.md; cores.log).
#
#   bench/cores.sh [ARGS for bench/cores.py, e.g. --games 1000000 --jobs "1 4 16"]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/cb-cores-out}
BIN=/tmp/cb-cores-bin
mkdir -p "$OUT" "$BIN"
for f in .cores/bin/*.xz; do
  xz -dc "$f" > "$BIN/$(basename "$f" .xz)"
done
chmod +x "$BIN"/*
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
cp .cores/commit "$OUT/commit" 2>/dev/null || true
exec python3 bench/cores.py --bin "$BIN" --out "$OUT" "$@"
