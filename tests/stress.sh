#!/usr/bin/env bash
# Runs the whole test suite RUNS times in a row (default 5) with HOGS busy loops (default: one per core)
# competing for the CPU, then once with one test thread, to find tests that depend on timing or luck.
# Stops at the first failing run and keeps every run's log in LOGS (default a temporary directory).
#
#   bash tests/stress.sh                 # after cargo build --release --workspace --all-targets
#   RUNS=10 HOGS=4 bash tests/stress.sh
set -euo pipefail
cd "$(dirname "$0")/.."

runs=${RUNS:-5}
hogs=${HOGS:-$(nproc)}
logs=${LOGS:-$(mktemp -d)}
mkdir -p "$logs"
pids=()
stop_hogs() {
    [ "${#pids[@]}" = 0 ] || kill "${pids[@]}" 2>/dev/null || true
    pids=()
}
trap stop_hogs EXIT INT TERM

# run NAME ARGS...: one suite run; prints its time and the tests it counted.
run() {
    local name=$1 start=$SECONDS rc=0
    shift
    cargo test --release --workspace "$@" >"$logs/$name.log" 2>&1 || rc=$?
    local passed failed
    passed=$(grep -oE '[0-9]+ passed' "$logs/$name.log" | awk '{s += $1} END {print s + 0}')
    failed=$(grep -oE '[0-9]+ failed' "$logs/$name.log" | awk '{s += $1} END {print s + 0}')
    echo "stress: $name: exit $rc, $passed passed, $failed failed, $((SECONDS - start)) s ($logs/$name.log)"
    if [ "$rc" != 0 ]; then
        grep -E '^test .* FAILED|panicked at' "$logs/$name.log" | head -20
        return "$rc"
    fi
}

cargo test --release --workspace --no-run >"$logs/build.log" 2>&1
for i in $(seq "$runs"); do
    for _ in $(seq "$hogs"); do
        (while :; do :; done) &
        pids+=($!)
    done
    run "loaded-$i"
    stop_hogs
done
run "one-thread" -- --test-threads 1
