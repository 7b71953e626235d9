#!/usr/bin/env bash
# Table A1 by Spark SQL (pipeline/spark/table_a1.py, Spark in local mode on a
# real JVM) against `chessbench sql RUN table_a1` (DuckDB), every row and
# column, on:
#   1. RUN itself;
#   2. a copy of RUN with Lichess-evaluation files (evals-*.parquet, copies
#      of a split's first chunk) and a commit in progress: `.parquet.tmp`
#      files of garbage bytes that no chunk entry names. Both readers must
#      count the evals files as evaluation rows and never open a .tmp (the
#      split holding only the .tmp files equals RUN's);
#   3. a copy of RUN caught between an annotate commit's entry and its
#      renames (the chunk is committed, its files are still .tmp).
#      `chessbench sql` refuses that run; Spark reads the committed
#      *.parquet files, so it must equal `chessbench sql` on the same copy
#      with that chunk's entry moved aside (its .tmp files then count as a
#      commit in progress).
#
# Usage: tests/spark/run.sh RUN BIN      (BIN: the chessbench binary)
#
# Environment:
#   SPARK_VENV   virtual environment with tests/spark/requirements.txt
#                (default ${CARGO_TARGET_DIR:-target}/spark-venv); created
#                and installed when missing or out of date (~500 MB)
#   PYTHON       the Python that creates it (default python3)
#   JAVA_HOME    the JVM (else java on PATH; Spark 4 needs Java 17 or 21)
#   CI=true      a missing Java, Python venv or pyspark fails instead of
#                skipping
#   KEEP_TMP=1   keep the temporary directory (copies, logs)
#
# Exits 0 when every comparison matches (or the test is skipped), 1 on any
# difference or error.

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
script=$repo/pipeline/spark/table_a1.py
requirements=$repo/tests/spark/requirements.txt

log() { echo "[spark-test $(date +%T)] $*"; }
skip() {
    if [[ ${CI:-} == true ]]; then
        echo "FAIL: $* (CI=true: the Spark test is required)"
        exit 1
    fi
    echo "SKIP: $*"
    exit 0
}
fail() {
    echo "FAIL: $*"
    exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

[[ $# == 2 ]] || { echo "usage: $0 RUN BIN" >&2; exit 2; }
run=$1
bin=$2
[[ -f $run/manifest.json ]] || fail "$run is not an ingested run (no manifest.json)"
[[ -x $bin ]] || fail "$bin is not an executable chessbench binary"
run=$(cd "$run" && pwd)
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
venv=${SPARK_VENV:-${CARGO_TARGET_DIR:-target}/spark-venv}
python=${PYTHON:-python3}

# --- Prerequisites ---------------------------------------------------------

java=${JAVA_HOME:+$JAVA_HOME/bin/}java
command -v "$java" >/dev/null || skip "no Java (Spark 4 needs Java 17 or 21: install openjdk-17-jre-headless or set JAVA_HOME)"
java_major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[[ ${java_major:-0} -ge 17 ]] || skip "Java ${java_major:-?} found; Spark 4 needs Java 17 or 21"
command -v "$python" >/dev/null || skip "no $python to create $venv"

if ! cmp -s "$requirements" "$venv/.requirements.txt" 2>/dev/null || ! "$venv/bin/python" -c 'import pyspark' 2>/dev/null; then
    log "installing pyspark into $venv (tests/spark/requirements.txt)"
    start=$(now)
    "$python" -m venv "$venv" || skip "could not create a virtual environment at $venv ($python -m venv)"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements" ||
        skip "could not install tests/spark/requirements.txt into $venv"
    cp "$requirements" "$venv/.requirements.txt"
    log "installed in $(since "$start") s"
fi
spark_version=$("$venv/bin/python" -c 'import pyspark; print(pyspark.__version__)')

# --- A private Spark configuration -----------------------------------------

tmp=$(mktemp -d "${TMPDIR:-/tmp}/chessbench-spark.XXXXXX")
cleanup() { if [[ ${KEEP_TMP:-0} == 1 ]]; then echo "kept $tmp"; else rm -rf "$tmp"; fi; }
trap cleanup EXIT
mkdir -p "$tmp/conf" "$tmp/local" "$tmp/java" "$tmp/python"

# Errors only, on stderr (which goes to a log printed on failure).
cat > "$tmp/conf/log4j2.properties" <<'EOF'
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
EOF
# Shuffle and spill files, the JVM's temporary files (native libraries) and
# the warehouse directory all under $tmp.
cat > "$tmp/conf/spark-defaults.conf" <<EOF
spark.master                     local[*]
spark.local.dir                  $tmp/local
spark.sql.warehouse.dir          $tmp/warehouse
spark.driver.extraJavaOptions    -Djava.io.tmpdir=$tmp/java -XX:-UsePerfData
spark.ui.enabled                 false
spark.ui.showConsoleProgress     false
EOF
export SPARK_CONF_DIR=$tmp/conf TMPDIR=$tmp/python SPARK_LOCAL_IP=127.0.0.1
# The venv's Spark and Python, as when it is activated: spark-submit finds
# its Spark home and runs the script with the venv's python3.
venv=$(cd "$venv" && pwd)
export PATH=$venv/bin:$PATH PYSPARK_PYTHON=$venv/bin/python PYSPARK_DRIVER_PYTHON=$venv/bin/python
unset SPARK_HOME

# --- Helpers -----------------------------------------------------------------

# table_a1 NAME DIR: both readers' JSON in $tmp/NAME.{chessbench,spark}.json.
chessbench_a1() { # NAME DIR
    "$bin" sql "$2" table_a1 --format json >"$tmp/$1.chessbench.json" 2>"$tmp/$1.chessbench.log"
}
spark_a1() { # NAME DIR [spark-submit|python]
    local how=${3:-spark-submit} cmd
    if [[ $how == python ]]; then cmd=("$venv/bin/python" "$script"); else cmd=("$venv/bin/spark-submit" "$script"); fi
    "${cmd[@]}" "$2" --json --log-level ERROR >"$tmp/$1.spark.json" 2>"$tmp/$1.spark.log" || {
        cat "$tmp/$1.spark.log"
        fail "$1: the Spark query failed (${cmd[*]} $2 --json)"
    }
}
# compare NAME TITLE [CB_JSON]: the table of both, cell by cell; fails on any difference.
compare() {
    "$venv/bin/python" - "$1" "$2" "${3:-$tmp/$1.chessbench.json}" "$tmp/$1.spark.json" <<'EOF'
import json, sys
name, title, a_path, b_path = sys.argv[1:]
a, b = json.load(open(a_path)), json.load(open(b_path))
cols = list(a[0]) if a else []
bad = []
if [list(r) for r in a] != [list(r) for r in b]:
    bad.append(f"columns differ: chessbench {[list(r) for r in a][:1]} spark {[list(r) for r in b][:1]}")
if [r.get("split") for r in a] != [r.get("split") for r in b]:
    bad.append(f"splits differ: chessbench {[r.get('split') for r in a]} spark {[r.get('split') for r in b]}")
print(f"{title}")
splits = [r["split"] for r in a]
cells = []
for c in cols:
    if c == "split":
        continue
    row = [c]
    for i, s in enumerate(splits):
        x = a[i][c]
        y = b[i].get(c) if i < len(b) else None
        ok = type(x) is type(y) is int and x == y
        row.append(f"{x} ok" if ok else f"{x} != {y} FAIL")
        if not ok:
            bad.append(f"{s}.{c}: chessbench {x!r}, spark {y!r}")
    cells.append(row)
head = ["column"] + splits
widths = [max(len(r[i]) for r in cells + [head]) for i in range(len(head))]
fmt = lambda r: "  " + "  ".join(v.ljust(widths[0]) if i == 0 else v.rjust(widths[i]) for i, v in enumerate(r))
print(fmt(head))
for r in cells:
    print(fmt(r))
if bad:
    print(f"FAIL ({name}): " + "; ".join(bad))
    sys.exit(1)
print(f"ok ({name}): {len(a)} splits x {len(cols) - 1} columns equal")
EOF
}
# copy_run DIR: the tables, the manifest and the chunk entries of RUN (not checkpoints or reports).
copy_run() {
    mkdir -p "$1"
    local entry
    for entry in manifest.json annotate games rejects boards legal_moves state_values action_values failures; do
        [[ -e $run/$entry ]] && cp -r "$run/$entry" "$1/"
    done
    return 0
}

start=$(now)
log "pyspark $spark_version, Java $java_major; chessbench $bin; run $run"

# --- 1. The run as it is -----------------------------------------------------

chessbench_a1 clean "$run" || { cat "$tmp/clean.chessbench.log"; fail "chessbench sql $run table_a1 failed"; }
spark_a1 clean "$run" spark-submit
compare clean "1. $run (spark-submit)"

# --- 2. Evaluation files and a commit in progress ----------------------------

copy=$tmp/in-progress
copy_run "$copy"
# The evaluation files go into the first annotated split, the .tmp files
# into the second (into the same one when the run has one).
evals_split= tmp_split=
for dir in "$copy"/state_values/split=*; do
    [[ -e $dir/chunk-00000000.parquet ]] || continue
    if [[ -z $evals_split ]]; then evals_split=${dir##*/split=}; else tmp_split=${dir##*/split=}; break; fi
done
[[ -n $evals_split ]] || fail "$run has no annotated split (state_values/split=*/chunk-00000000.parquet)"
tmp_split=${tmp_split:-$evals_split}
for table in state_values action_values; do
    [[ -e $copy/$table/split=$evals_split/chunk-00000000.parquet ]] &&
        cp "$copy/$table/split=$evals_split/chunk-00000000.parquet" "$copy/$table/split=$evals_split/evals-00000000.parquet"
    # Garbage where a writer's step 1 would be: never a valid Parquet file.
    head -c 65536 /dev/urandom >"$copy/$table/split=$tmp_split/chunk-99999999.parquet.tmp"
    head -c 4096 /dev/urandom >"$copy/$table/split=$tmp_split/evals-99999999.parquet.tmp"
done
chessbench_a1 in-progress "$copy" ||
    { cat "$tmp/in-progress.chessbench.log"; fail "chessbench sql refused a run with a commit in progress"; }
spark_a1 in-progress "$copy" python
compare in-progress "2. copy: evals-*.parquet in split $evals_split, garbage *.parquet.tmp in split $tmp_split (python)"
"$venv/bin/python" - "$tmp/clean.spark.json" "$tmp/in-progress.spark.json" "$evals_split" "$tmp_split" <<'EOF' || fail "the evaluation files or the .tmp files were not read as they should be"
import json, sys
clean, copy = (json.load(open(p)) for p in sys.argv[1:3])
evals_split, tmp_split = sys.argv[3:5]
clean = {r["split"]: r for r in clean}
copy = {r["split"]: r for r in copy}
ok = True
if tmp_split != evals_split and copy[tmp_split] != clean[tmp_split]:
    print(f"split {tmp_split}: the .tmp files changed its numbers: {copy[tmp_split]} vs {clean[tmp_split]}")
    ok = False
if copy[evals_split]["lichess_evals_state_values"] == 0 or copy[evals_split]["state_values"] != clean[evals_split]["state_values"]:
    print(f"split {evals_split}: evals-*.parquet not counted as evaluation rows: {copy[evals_split]}")
    ok = False
print(f"  split {tmp_split} with its .tmp files {'equals the run' if tmp_split != evals_split else 'read'}; split {evals_split}: "
      f"{copy[evals_split]['lichess_evals_state_values']} evals state values, {copy[evals_split]['lichess_evals_action_values']} evals action values")
sys.exit(0 if ok else 1)
EOF

# --- 3. A commit between its entry and its renames -----------------------------

copy=$tmp/interrupted
copy_run "$copy"
chunk=
for entry in "$copy"/annotate/split=*/chunk-*.json; do
    [[ -e $entry ]] || continue
    split_dir=${entry%/*}
    split=${split_dir##*/split=}
    stem=$(basename "$entry" .json)
    [[ -e $copy/state_values/split=$split/$stem.parquet ]] && chunk=$stem && break
done
[[ -n $chunk ]] || fail "$run has no committed chunk (annotate/split=*/chunk-*.json) to interrupt"
for table in state_values action_values failures; do
    f=$copy/$table/split=$split/$chunk.parquet
    [[ -e $f ]] && mv "$f" "$f.tmp"
done
if "$bin" sql "$copy" table_a1 --format json >"$tmp/interrupted.chessbench.json" 2>"$tmp/interrupted.chessbench.log"; then
    fail "chessbench sql read a run whose chunk $chunk of split $split is committed but not renamed"
fi
grep -q 'interrupted' "$tmp/interrupted.chessbench.log" ||
    { cat "$tmp/interrupted.chessbench.log"; fail "chessbench sql failed on the interrupted commit without saying so"; }
log "3. chessbench sql refuses the copy whose $chunk of split $split is committed but not renamed (as it should)"
spark_a1 interrupted "$copy" spark-submit
mv "$copy/annotate/split=$split/$chunk.json" "$tmp/$chunk.json.aside"
chessbench_a1 interrupted "$copy" ||
    { cat "$tmp/interrupted.chessbench.log"; fail "chessbench sql failed on the copy with the entry moved aside"; }
mv "$tmp/$chunk.json.aside" "$copy/annotate/split=$split/$chunk.json"
compare interrupted "3. copy: $chunk of split $split committed, its files still .tmp; Spark vs chessbench with its entry aside (spark-submit)"

log "all equal: Spark $spark_version reads the tables as chessbench sql does ($(since "$start") s)"
