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
# Against this machine's ceilings (`cargo bench --bench ceilings`, the same threads): prefill as a fraction of the
# int8 dot-product peak (of the f32 FMA peak for a file of float weights), counting 2 operations per weight and
# prompt token; decode as the GB/s of weights it streams (every matrix once per token, the token embeddings only
# where they are the tied output layer) against the read bandwidth. The weights are counted with PyPI's `gguf`.
# The ceilings are measured again at the end, with a warning where they moved by more than 15% (a busy host).
#
# Environment: SHAPE (a `make-checkpoint --shape`, default tinyllama-1.1b), TYPES (default "f16 q8_0 q4_k_m"),
# BATCH_TYPES ("q8_0 q4_k_m"; empty for none), THREADS (2), REPS (llama-bench repetitions, 2), ROUNDS (1: each file's
# peer and tgi runs alternate this many times, and the tables give the median of the rounds' ratios and their
# range, so that a host whose speed moves between minutes moves both sides of a ratio), TGI (default
# target/release/tgi). An entry of TYPES or BATCH_TYPES may also be the path of a GGUF
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
ROUNDS=${ROUNDS:-1}
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
python3 -c "import gguf" 2>/dev/null || { echo "python3 -m pip install gguf: the weights are counted with it" >&2; exit 1; }
# Measures the ceilings into $CEILINGS and prints them; with an argument (the first measurement), warns where the
# machine changed under the run (another guest on the host: the figures between are not a quiet run's).
ceilings() {
    log "this machine's ceilings"
    CEILINGS=$(cd "$ROOT" && RAYON_NUM_THREADS=$THREADS cargo bench -q -p tgi-engines --bench ceilings -- --json)
    python3 - "$CEILINGS" "$@" <<'PY'
import json, sys
c = json.loads(sys.argv[1])
print(f"ceilings{' at the end' if len(sys.argv) > 2 else ''}: read {c['read_gb_per_s']:.1f} GB/s, "
      f"int8 {c['int8_gops']:.0f} GOPS ({c['int8_instruction']}), f32 FMA {c['fma_gflops']:.0f} GFLOPS ({c['fma_instruction']})")
if len(sys.argv) > 2:
    first = json.loads(sys.argv[2])
    moved = [k for k in ("read_gb_per_s", "int8_gops") if abs(c[k] / first[k] - 1) > 0.15]
    if moved:
        print(f"WARNING: {', '.join(moved)} moved by more than 15% during the run: the machine was not quiet")
PY
}
ceilings
FIRST_CEILINGS=$CEILINGS
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
echo "| type | llama.cpp pp512 | tgi prefill 512 | ratio | of the peak: llama.cpp / tgi | llama.cpp tg128 | tgi decode 128 | ratio | weights read: llama.cpp / tgi (roofline) | peak RSS llama.cpp / tgi |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for t in $TYPES; do
    f=$(file_for "$t")
    pp_l=() tg_l=() pp_t=() tg_t=() rss_l=0 rss_t=0
    for round in $(seq "$ROUNDS"); do
        log "$t: llama-bench (round $round of $ROUNDS)"
        rss=$(rss_of "$LLAMA_BIN/llama-bench" -m "$f" -p 512 -n 128 -t "$THREADS" -r "$REPS" -o json)
        rss_l=$((rss > rss_l ? rss : rss_l))
        pp_l+=("$(json "[r['avg_ts'] for r in d if r['n_prompt'] > 0][0]")")
        tg_l+=("$(json "[r['avg_ts'] for r in d if r['n_gen'] > 0][0]")")
        log "$t: tgi prefill"
        rss=$(rss_of "$TGI" generate -m "$f" -t "$THREADS" --temperature 0 --ignore-eos -n 1 --json "$PROMPT512")
        if [[ $(json "len(d['prompt_token_ids'])") == 511 ]]; then # no BOS (Qwen): one more word
            rss=$(rss_of "$TGI" generate -m "$f" -t "$THREADS" --temperature 0 --ignore-eos -n 1 --json "the $PROMPT512")
        fi
        [[ $(json "len(d['prompt_token_ids'])") == 512 ]] || { echo "the prompt is not 512 tokens" >&2; exit 1; }
        rss_t=$((rss > rss_t ? rss : rss_t))
        pp_t+=("$(json "d['timings']['prefill_tokens_per_second']")")
        log "$t: tgi decode"
        rss=$(rss_of "$TGI" generate -m "$f" -t "$THREADS" --temperature 0 --ignore-eos -n 129 --json "the")
        rss_t=$((rss > rss_t ? rss : rss_t))
        tg_t+=("$(json "d['timings']['decode_tokens_per_second']")")
    done
    python3 - "$t" "$f" "$CEILINGS" "${pp_l[*]}" "${pp_t[*]}" "${tg_l[*]}" "${tg_t[*]}" "$rss_l" "$rss_t" <<'PY'
import json, statistics, sys
from gguf import GGMLQuantizationType as Q, GGUFReader
t, path, ceilings, ppl, ppt, tgl, tgt, rl, rt = sys.argv[1:]
t = t.rsplit("/", 1)[-1]
ppl, ppt, tgl, tgt = ([float(v) for v in s.split()] for s in (ppl, ppt, tgl, tgt))
c = json.loads(ceilings)
matrices = [m for m in GGUFReader(path).tensors if len(m.shape) >= 2]
names = {m.name for m in matrices}
output = "output.weight" if "output.weight" in names else "token_embd.weight"  # tied: the embeddings
streamed = [m for m in matrices if m.name != "token_embd.weight" or output == "token_embd.weight"]
read_gb = sum(int(m.n_bytes) for m in streamed) / 1e9
# Prefill computes the output layer for the last row only.
prompt_params = sum(int(m.n_elements) for m in streamed if m.name != output)
floats = all(m.tensor_type in (Q.F16, Q.BF16, Q.F32) for m in streamed)
peak = c["fma_gflops"] if floats else c["int8_gops"]
share = lambda tps: f"{100 * 2 * prompt_params * tps / 1e9 / peak:.0f}%"
med = statistics.median
def ratio(peer, ours):
    """The median of the rounds' ratios, with their range where there are several."""
    r = [o / p for p, o in zip(peer, ours)]
    return f"{med(r):.2f}" + (f" ({min(r):.2f}-{max(r):.2f})" if len(r) > 1 else "")
print(f"| {t} | {med(ppl):.1f} tok/s | {med(ppt):.1f} tok/s | {ratio(ppl, ppt)} | {share(med(ppl))} / {share(med(ppt))} of "
      f"{'FMA' if floats else 'int8'} | {med(tgl):.1f} tok/s | {med(tgt):.1f} tok/s | {ratio(tgl, tgt)} | "
      f"{read_gb * med(tgl):.1f} / {read_gb * med(tgt):.1f} GB/s ({c['read_gb_per_s']:.1f}) | {rl} / {rt} MB |")
PY
done

echo
echo "| type | B | llama.cpp aggregate decode | tgi aggregate decode | ratio | tgi B / tgi B=1 |"
echo "| --- | --- | --- | --- | --- | --- |"
for t in $BATCH_TYPES; do
    f=$(file_for "$t")
    : >"$WORK/llama-bb.txt"
    : >"$WORK/tgi-bb.txt"
    for round in $(seq "$ROUNDS"); do
        log "$t: llama-batched-bench (round $round of $ROUNDS)"
        "$LLAMA_BIN/llama-batched-bench" -m "$f" -c 2048 -b 2048 -ub 512 -npp 16 -ntg 32 -npl 1,4,16 -t "$THREADS" \
            2>/dev/null | awk -F'|' -v r="$round" '/^\| +16 \|/ { gsub(/ /, ""); print r, $4, $9 }' >>"$WORK/llama-bb.txt"
        log "$t: tgi batched_decode"
        (cd "$ROOT" && RAYON_NUM_THREADS=$THREADS cargo bench -q -p tgi-engines --bench batched_decode -- "$f" 16 32 1,4,16) \
            | awk -F'|' -v r="$round" '/^\| +16 \|/ { gsub(/ /, ""); print r, $4, $8 }' >>"$WORK/tgi-bb.txt"
    done
    python3 - "$t" "$WORK/llama-bb.txt" "$WORK/tgi-bb.txt" <<'PY'
import statistics, sys
t, lf, tf = sys.argv[1:]
t = t.rsplit("/", 1)[-1]
def read(path):
    """{(round, B): aggregate tok/s}"""
    return {(int(r), int(b)): float(s) for r, b, s in (l.split() for l in open(path) if l.strip())}
l, g = read(lf), read(tf)
med = statistics.median
for b in sorted({b for _, b in g}):
    rounds = sorted(r for r, bb in g if bb == b)
    ratios = [g[r, b] / l[r, b] if (r, b) in l else float("nan") for r in rounds]
    span = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
    ours, peer = med(g[r, b] for r in rounds), med(l.get((r, b), float("nan")) for r in rounds)
    ones = med(g[r, b] / g[r, 1] for r in rounds)
    print(f"| {t} | {b} | {peer:.1f} tok/s | {ours:.1f} tok/s | {med(ratios):.2f}{span} | {ones:.2f} |")
PY
done

echo
ceilings "$FIRST_CEILINGS"
