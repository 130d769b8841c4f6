#!/usr/bin/env bash
# Builds every fuzz target once and runs each for FUZZ_SECONDS (default 30) from a temporary copy
# of its seed corpus; fails on the first crash, panic, hang or out-of-memory, whose input is kept
# under FUZZ_ARTIFACTS (default fuzz/artifacts/<target>/) and printed.
#
#   FUZZ_SECONDS=30 FUZZ_SANITIZER=address fuzz/ci.sh
#
# FUZZ_SANITIZER: address (default) or none (faster to build and run, catches only panics,
# aborts, hangs and out-of-memory; Rust code without `unsafe` needs no more).
# FUZZ_SEED: libFuzzer's random seed (default: a new one each run). With a seed every run draws the same
# sequence of inputs, of which a slower machine tries fewer; .ci/run fixes one, so that CI finds nothing a longer
# run with that seed has not (run without it to explore; what it finds is fixed and its input added to corpus/).
# FUZZ_TARGET_DIR: the build directory (default fuzz/target); .ci/run keeps it outside the checkout, where
# the dependencies' nightly build is reused by the next clone.
set -euo pipefail

cd "$(dirname "$0")"
seconds=${FUZZ_SECONDS:-30}
sanitizer=${FUZZ_SANITIZER:-address}
artifacts=$(realpath -m "${FUZZ_ARTIFACTS:-artifacts}")
target_dir=$(realpath -m "${FUZZ_TARGET_DIR:-target}")
seed=${FUZZ_SEED:-0}

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

start=$(date +%s)
cargo +nightly fuzz build -O -s "$sanitizer" --target-dir "$target_dir"
echo "fuzz: built every target in $(($(date +%s) - start)) s"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The targets that read files write them under $TMPDIR: keep those in the work directory too.
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
status=0
for target in $(cargo +nightly fuzz list); do
    cp -r "corpus/$target" "$work/$target"
    mkdir -p "$artifacts/$target"
    log="$work/$target.log"
    if cargo +nightly fuzz run -O -s "$sanitizer" --target-dir "$target_dir" "$target" "$work/$target" -- \
        -max_total_time="$seconds" -seed="$seed" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/$target/" -print_final_stats=1 >"$log" 2>&1; then
        echo "fuzz: $target: $(grep -E '^#[0-9]+.*DONE' "$log" | tail -1)"
    else
        status=1
        echo "fuzz: $target FAILED; the last lines of its log:"
        tail -40 "$log"
        for input in "$artifacts/$target"/*; do
            [ -f "$input" ] || continue
            echo "fuzz: $target: crashing input $input (base64):"
            base64 "$input" | head -c 4000
            echo
        done
    fi
done
exit "$status"
