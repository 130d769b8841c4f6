#!/usr/bin/env bash
# Measures the tgi engine against llama.cpp on the same GGUF files, in the same run: a model of a real shape with
# random weights (TinyLlama-1.1B by default; F16, Q8_0, Q4_K_M), 2 threads.
#
# Usage: bench/engine_vs_llamacpp.sh LLAMA_BIN_DIR [WORK_DIR]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-bench and llama-batched-bench (this script never builds llama.cpp)
#   WORK_DIR       scratch directory, default bench/out/ (gitignored); the checkpoint and GGUF files are made there
#                  once and reused
#
# Single sequence: llama-bench pp512 / tg128 against `tgi generate --json` with a 512-token prompt (prefill tok/s)
# and with a 2-token prompt and 128 new tokens (decode tok/s, from an almost empty context like tg128), each under
# /usr/bin/time for peak RSS. Batched decode: llama-batched-bench (-npp 16 -ntg 32 -npl 1,4,16) against tgi's
# `cargo bench --bench batched_decode` with the same shape: B sequences prefill 16 tokens, then decode 32 tokens
# together; aggregate decode tok/s. Prints markdown tables with the ratio tgi / llama.cpp.
#
# Environment: SHAPE (a `make-checkpoint --shape`, default tinyllama-1.1b), TYPES (default "f16 q8_0 q4_k_m"), BATCH_TYPES ("q8_0 q4_k_m"; empty for none), THREADS (2), REPS (llama-bench
# repetitions, 2), TGI (default target/release/tgi). An entry of TYPES or BATCH_TYPES may also be the path of a GGUF
# file, measured as it is: e.g. TYPES="$(bash tests/gemma/fetch.sh)" for the published Gemma 3 270M Q4_K_M.
# The CPU's model, family and flags are printed first.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_BIN=$(cd "$1" && pwd)
WORK=${2:-$ROOT/bench/out}
SHAPE=${SHAPE:-tinyllama-1.1b}
# File names: the TinyLlama files keep their historical prefix.
PREFIX=$([[ $SHAPE == tinyllama-1.1b ]] && echo tinyllama || echo "$SHAPE")
TYPES=${TYPES-"f16 q8_0 q4_k_m"}
BATCH_TYPES=${BATCH_TYPES-"q8_0 q4_k_m"}
THREADS=${THREADS:-2}
REPS=${REPS:-2}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TGI=${TGI:-$TARGET/release/tgi}
TIME=/usr/bin/time
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

for tool in llama-bench llama-batched-bench; do
    [[ -x $LLAMA_BIN/$tool ]] || { echo "no $tool in $LLAMA_BIN" >&2; exit 1; }
done
[[ -x $TIME ]] || { echo "$TIME missing: apt-get install -y time" >&2; exit 1; }
[[ -x $TGI ]] || (cd "$ROOT" && cargo build --release)
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
log() { echo "[$(date +%T)] $*" >&2; }

echo "CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), family $(awk -F': ' '/^cpu family/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores, $THREADS threads"
echo "flags: $(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | tr '\n' ' ')"
echo

# The model files: checkpoint -> F16 GGUF -> quantized GGUFs, all made by tgi once (unless every entry is a file).
F16=$WORK/$PREFIX-f16.gguf
made=false
for t in $TYPES $BATCH_TYPES; do [[ -f $t ]] || made=true; done
if $made && [[ ! -f $F16 ]]; then
    [[ -d $WORK/$SHAPE ]] || { log "making the checkpoint"; (cd "$ROOT" && cargo run --release -q -p tgi-make-checkpoint -- --shape "$SHAPE" -o "$WORK/$SHAPE"); }
    "$TGI" quantize "$WORK/$SHAPE" --type f16 -o "$F16" -q
fi
file_for() {
    local t=$1 f=$WORK/$PREFIX-$1.tgi.gguf
    [[ -f $t ]] && { echo "$t"; return; }
    [[ $t == f16 ]] && { echo "$F16"; return; }
    [[ -f $f ]] || "$TGI" quantize "$F16" --type "$t" -o "$f" -q
    echo "$f"
}

# Runs "$@" under /usr/bin/time -v; stdout to $OUT_FILE; prints peak RSS in MB.
rss_of() {
    local tf
    tf=$(mktemp)
    "$TIME" -v -o "$tf" "$@" >"$OUT_FILE"
    awk -F': ' '/Maximum resident set size/ { printf "%d\n", $2 / 1024 }' "$tf"
    rm -f "$tf"
}
OUT_FILE=$(mktemp)
trap 'rm -f "$OUT_FILE"' EXIT
json() { python3 -c "import json,sys; d=json.load(open('$OUT_FILE')); print($1)"; }

PROMPT512=$(python3 -c "print(' '.join(['the'] * 511))") # BOS + 511 tokens (one more word without a BOS)
echo "| type | llama.cpp pp512 | tgi prefill 512 | ratio | llama.cpp tg128 | tgi decode 128 | ratio | peak RSS llama.cpp / tgi |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for t in $TYPES; do
    f=$(file_for "$t")
    log "$t: llama-bench"
    rss_l=$(rss_of "$LLAMA_BIN/llama-bench" -m "$f" -p 512 -n 128 -t "$THREADS" -r "$REPS" -o json)
    pp_l=$(json "[r['avg_ts'] for r in d if r['n_prompt'] > 0][0]")
    tg_l=$(json "[r['avg_ts'] for r in d if r['n_gen'] > 0][0]")
    log "$t: tgi prefill"
    rss_t=$(rss_of "$TGI" generate -m "$f" -t "$THREADS" --temperature 0 --ignore-eos -n 1 --json "$PROMPT512")
    if [[ $(json "len(d['prompt_token_ids'])") == 511 ]]; then # no BOS (Qwen): one more word
        rss_t=$(rss_of "$TGI" generate -m "$f" -t "$THREADS" --temperature 0 --ignore-eos -n 1 --json "the $PROMPT512")
    fi
    [[ $(json "len(d['prompt_token_ids'])") == 512 ]] || { echo "the prompt is not 512 tokens" >&2; exit 1; }
    pp_t=$(json "d['timings']['prefill_tokens_per_second']")
    log "$t: tgi decode"
    rss_d=$(rss_of "$TGI" generate -m "$f" -t "$THREADS" --temperature 0 --ignore-eos -n 129 --json "the")
    tg_t=$(json "d['timings']['decode_tokens_per_second']")
    python3 - "$t" "$pp_l" "$pp_t" "$tg_l" "$tg_t" "$rss_l" "$rss_t" "$rss_d" <<'PY'
import sys
t, ppl, ppt, tgl, tgt, rl, rt, rd = sys.argv[1:]
t = t.rsplit("/", 1)[-1]
ppl, ppt, tgl, tgt = map(float, (ppl, ppt, tgl, tgt))
print(f"| {t} | {ppl:.1f} tok/s | {ppt:.1f} tok/s | {ppt/ppl:.2f} | {tgl:.1f} tok/s | {tgt:.1f} tok/s | {tgt/tgl:.2f} | {rl} / {max(int(rt), int(rd))} MB |")
PY
done

echo
echo "| type | B | llama.cpp aggregate decode | tgi aggregate decode | ratio | tgi B / tgi B=1 |"
echo "| --- | --- | --- | --- | --- | --- |"
for t in $BATCH_TYPES; do
    f=$(file_for "$t")
    log "$t: llama-batched-bench"
    "$LLAMA_BIN/llama-batched-bench" -m "$f" -c 2048 -b 2048 -ub 512 -npp 16 -ntg 32 -npl 1,4,16 -t "$THREADS" 2>/dev/null \
        | awk -F'|' '/^\| +16 \|/ { gsub(/ /, ""); print $4, $9 }' >"$WORK/llama-bb.txt"
    log "$t: tgi batched_decode"
    (cd "$ROOT" && RAYON_NUM_THREADS=$THREADS cargo bench -q -p tgi-engines --bench batched_decode -- "$f" 16 32 1,4,16) \
        | awk -F'|' '/^\| +16 \|/ { gsub(/ /, ""); print $4, $8 }' >"$WORK/tgi-bb.txt"
    python3 - "$t" "$WORK/llama-bb.txt" "$WORK/tgi-bb.txt" <<'PY'
import sys
t, lf, tf = sys.argv[1:]
t = t.rsplit("/", 1)[-1]
read = lambda p: {int(b): float(s) for b, s in (l.split() for l in open(p) if l.strip())}
l, g = read(lf), read(tf)
for b in sorted(g):
    print(f"| {t} | {b} | {l.get(b, float('nan')):.1f} tok/s | {g[b]:.1f} tok/s | {g[b]/l.get(b, float('nan')):.2f} | {g[b]/g[1]:.2f} |")
PY
done
