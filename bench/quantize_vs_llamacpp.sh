#!/usr/bin/env bash
# Times `tgi quantize` against llama.cpp's `llama-quantize` on a TinyLlama-1.1B-shaped F16 GGUF with random weights,
# and checks that both write the same tensor data.
#
# Usage: bench/quantize_vs_llamacpp.sh LLAMA_BIN_DIR [WORK_DIR]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-quantize (built elsewhere; this script never builds llama.cpp)
#   WORK_DIR       scratch directory, default bench/out/ (gitignored): the checkpoint and the F16 GGUF are made
#                  there once and reused
#
# Steps: make-checkpoint writes the tinyllama-1.1b F16 safetensors checkpoint (2.2 GB); `tgi quantize --type f16`
# turns it into WORK_DIR/tinyllama-f16.gguf; then for each type, `llama-quantize F16.gguf OUT TYPE THREADS` and
# `tgi quantize F16.gguf --type TYPE --threads THREADS` run RUNS times each under /usr/bin/time -v (Debian package
# `time`). Prints a markdown table: best wall time of each, the speed ratio, peak RSS, and whether the outputs match.
#
# Environment: TYPES (default "q4_k_m q8_0"), RUNS (2), THREADS (2), TGI (default target/release/tgi, built with
# cargo if missing), F16_GGUF (use this F16 GGUF instead of making one), SKIP_TGI=1 (time llama.cpp only).
# Needs python3 with `gguf` and `numpy` for the comparison (tests/python/requirements.txt).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_BIN=$(cd "$1" && pwd)
WORK=${2:-$ROOT/bench/out}
TYPES=${TYPES:-"q4_k_m q8_0"}
RUNS=${RUNS:-2}
THREADS=${THREADS:-2}
SKIP_TGI=${SKIP_TGI:-0}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TGI=${TGI:-$TARGET/release/tgi}
MAKE_CHECKPOINT=$TARGET/release/make-checkpoint
TIME=/usr/bin/time

[[ -x $LLAMA_BIN/llama-quantize ]] || { echo "no llama-quantize in $LLAMA_BIN" >&2; exit 1; }
[[ -x $TIME ]] || { echo "$TIME missing: apt-get install -y time" >&2; exit 1; }
python3 -c 'import gguf, numpy' 2>/dev/null || { echo "python3 needs gguf and numpy (pip install gguf numpy)" >&2; exit 1; }
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)

log() { echo "[$(date +%T)] $*" >&2; }

# Runs "$@" under /usr/bin/time -v; prints "WALL_SECONDS MAX_RSS_KB".
timed() {
    local tf
    tf=$(mktemp)
    if ! "$TIME" -v -o "$tf" "$@" >"$tf.out" 2>&1; then
        echo "command failed: $*" >&2
        tail -5 "$tf.out" >&2
        rm -f "$tf" "$tf.out"
        return 1
    fi
    awk -F': ' '
        /Elapsed \(wall clock\)/ { n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; wall = s }
        /Maximum resident set size/ { rss = $2 }
        END { printf "%.2f %d\n", wall, rss }' "$tf"
    rm -f "$tf" "$tf.out"
}

# Best wall time and largest peak RSS over RUNS runs of "$@": prints "WALL RSS_KB".
best_of() {
    local best="" rss=0 w r i
    for ((i = 1; i <= RUNS; i++)); do
        read -r w r < <(timed "$@") || return 1
        log "    run $i: ${w} s, $((r / 1024)) MB"
        if [[ -z $best ]] || awk "BEGIN { exit !($w < $best) }"; then best=$w; fi
        ((r > rss)) && rss=$r
    done
    echo "$best $rss"
}

# Compares two GGUF files: "identical (whole file)", "tensor data identical (headers differ)" or "no: ...".
compare() {
    python3 - "$1" "$2" <<'EOF'
import filecmp, sys
from gguf import GGUFReader
a, b = sys.argv[1], sys.argv[2]
if filecmp.cmp(a, b, shallow=False):
    print("identical (whole file)")
    sys.exit()
ra, rb = GGUFReader(a), GGUFReader(b)
ta = {t.name: t for t in ra.tensors}
tb = {t.name: t for t in rb.tensors}
bad = sorted(set(ta) ^ set(tb))
for name in sorted(set(ta) & set(tb)):
    x, y = ta[name], tb[name]
    if x.tensor_type != y.tensor_type or x.data.tobytes() != y.data.tobytes():
        bad.append(name)
if bad:
    print(f"no: {len(bad)} of {len(ta)} tensors differ (first: {bad[0]})")
else:
    print("tensor data identical (headers differ)")
EOF
}

if [[ $SKIP_TGI != 1 && ! -x $TGI ]]; then
    log "building tgi (cargo build --release -p tgi)"
    (cd "$ROOT" && cargo build --release -p tgi)
fi

F16=${F16_GGUF:-$WORK/tinyllama-f16.gguf}
if [[ ! -f $F16 ]]; then
    CKPT=$WORK/tinyllama-1.1b-f16
    if [[ ! -f $CKPT/config.json ]]; then
        [[ -x $MAKE_CHECKPOINT ]] || (cd "$ROOT" && cargo build --release -p tgi-make-checkpoint)
        log "making the checkpoint $CKPT"
        "$MAKE_CHECKPOINT" --shape tinyllama-1.1b --dtype f16 --seed 0 -o "$CKPT" >&2
    fi
    [[ $SKIP_TGI != 1 ]] || { echo "SKIP_TGI=1 needs F16_GGUF (tgi makes the F16 GGUF)" >&2; exit 1; }
    log "converting to $F16"
    "$TGI" quantize "$CKPT" --format gguf --type f16 -o "$F16" --force --quiet
fi

declare -A LLAMA_TYPE=([q8_0]=Q8_0 [q4_0]=Q4_0 [q4_1]=Q4_1 [q5_0]=Q5_0 [q5_1]=Q5_1 [q2_k]=Q2_K [q3_k_m]=Q3_K_M
    [q4_k_s]=Q4_K_S [q4_k_m]=Q4_K_M [q5_k_s]=Q5_K_S [q5_k_m]=Q5_K_M [q6_k]=Q6_K [f16]=F16 [bf16]=BF16)

rows=()
for type in $TYPES; do
    lt=${LLAMA_TYPE[$type]:?unknown type $type}
    out_llama=$WORK/tinyllama-$type.llamacpp.gguf
    out_tgi=$WORK/tinyllama-$type.tgi.gguf
    log "$type: llama-quantize x$RUNS"
    read -r lw lr < <(best_of "$LLAMA_BIN/llama-quantize" "$F16" "$out_llama" "$lt" "$THREADS")
    if [[ $SKIP_TGI == 1 ]]; then
        rows+=("| $type | $lw | - | - | $((lr / 1024)) | - | - |")
        continue
    fi
    log "$type: tgi quantize x$RUNS"
    read -r tw tr < <(best_of "$TGI" quantize "$F16" --format gguf --type "$type" --threads "$THREADS" \
        -o "$out_tgi" --force --quiet)
    ratio=$(awk "BEGIN { printf \"%.2f\", $lw / $tw }")
    same=$(compare "$out_llama" "$out_tgi")
    rows+=("| $type | $lw | $tw | $ratio | $((lr / 1024)) | $((tr / 1024)) | $same |")
done

echo
echo "Input: $(basename "$F16") ($(du -h "$F16" | cut -f1)), $THREADS threads, best wall time of $RUNS runs, $(nproc) CPUs"
echo
echo "| type | llama.cpp wall s | tgi wall s | speed ratio (llama/tgi) | llama.cpp peak RSS MB | tgi peak RSS MB | outputs identical |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
