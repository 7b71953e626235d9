# Shared by the Slurm tests (tests/slurm/run.sh, tests/slurm/faults.sh):
# sourced after setting HARNESS_NAME, the prefix of their log lines.
#
#   log MSG...    a timestamped progress line
#   skip REASON   exit 0 saying why, or fail under REQUIRE_SLURM=1
#   fail MSG      exit 1 (the EXIT trap sees `reported` set: the failure
#                 was said, not an unexpected error)
#   lichess_games prints the path of the real Lichess games inside the
#                 pgn-reader crate (lichess_db_1000k.pgn); fails without

log() { echo "[$HARNESS_NAME $(date +%T)] $*"; }
skip() {
    if [[ ${REQUIRE_SLURM:-0} == 1 ]]; then
        echo "FAIL: $* (REQUIRE_SLURM=1)"
        exit 1
    fi
    echo "SKIP: $*"
    exit 0
}
reported=0
fail() {
    reported=1
    echo "FAIL: $*"
    exit 1
}
lichess_games() {
    local pgn
    pgn=$(cargo metadata --format-version 1 --locked --offline 2>/dev/null | python3 -c '
import json, os, sys
p = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "pgn-reader"][0]
print(os.path.join(os.path.dirname(p["manifest_path"]), "benches", "lichess_db_1000k.pgn"))')
    if [[ ! -f $pgn ]]; then
        echo "FAIL: no Lichess games at '$pgn' (is the pgn-reader crate downloaded? cargo fetch)" >&2
        return 1
    fi
    echo "$pgn"
}
