#!/usr/bin/env bash
# Times `tgi imatrix` against llama.cpp's `llama-imatrix` on the same model and text, in the same run, and compares
# the two matrices entry by entry (counts, and the largest relative difference of the sums).
#
# Usage: bench/imatrix_vs_llamacpp.sh LLAMA_BIN_DIR MODEL_GGUF TEXT [WORK_DIR]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-imatrix (this script never builds llama.cpp)
#   MODEL_GGUF     the model both read (e.g. $(bash tests/gemma/fetch.sh), the published Gemma 3 270M Q4_K_M)
#   TEXT           the calibration text (e.g. models/stories-distill-4l/text/calibration.txt)
#   WORK_DIR       scratch directory, default bench/out/ (gitignored)
#
# Environment: CTX (tokens per chunk, 512), CHUNKS (chunks, 16), THREADS (2), TGI (default target/release/tgi).
# Nothing else should run on the machine meanwhile. The CPU's model, family and flags are printed first.
#
# Quality (with QUALITY_TEXT set, e.g. models/stories-distill-4l/text/heldout.txt, and MODEL_GGUF an F32/F16 GGUF):
# each pipeline then quantizes MODEL_GGUF with its own matrix, llama-quantize with llama-imatrix's and `tgi quantize`
# with tgi's, for each entry of QUALITY_TYPES (default "q4_k_m q4_k_m+imatrix iq4_xs+imatrix iq3_m+imatrix
# iq2_m+imatrix iq1_m+imatrix"; `+imatrix` passes the matrix), and scores every file on QUALITY_TEXT in chunks of
# QUALITY_CTX (128) tokens against MODEL_GGUF's own distributions: llama-perplexity --kl-divergence for llama.cpp's
# files, `tgi perplexity --kl-divergence` for tgi's. Prints size, bits per weight (tensor bytes · 8 / weights),
# perplexity, mean and 99% KLD and the same-top-token percentage of both. Needs python3 with gguf and numpy.
set -euo pipefail

if [[ $# -lt 3 || $# -gt 4 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_BIN=$(cd "$1" && pwd)
MODEL=$2
TEXT=$3
WORK=${4:-$ROOT/bench/out}
CTX=${CTX:-512}
QUALITY_TEXT=${QUALITY_TEXT:-}
QUALITY_TYPES=${QUALITY_TYPES:-"q4_k_m q4_k_m+imatrix iq4_xs+imatrix iq3_m+imatrix iq2_m+imatrix iq1_m+imatrix"}
QUALITY_CTX=${QUALITY_CTX:-128}
CHUNKS=${CHUNKS:-16}
THREADS=${THREADS:-2}
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
[[ -x $LLAMA_BIN/llama-imatrix ]] || { echo "no llama-imatrix in $LLAMA_BIN" >&2; exit 1; }
[[ -x $TGI ]] || (cd "$ROOT" && cargo build --release)
mkdir -p "$WORK"
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), family $(awk -F': ' '/^cpu family/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores, $THREADS threads"
echo "flags: $(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | tr '\n' ' ')"
echo "model: $MODEL; text: $TEXT; $CHUNKS chunks of $CTX tokens"
echo

seconds() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
llama=$(seconds "$LLAMA_BIN/llama-imatrix" -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" \
    -o "$WORK/llama.imatrix.gguf")
ours=$(seconds "$TGI" imatrix -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$THREADS" \
    -o "$WORK/tgi.imatrix.gguf" --force -q)

python3 - "$WORK/llama.imatrix.gguf" "$WORK/tgi.imatrix.gguf" "$llama" "$ours" <<'PY'
import sys
import numpy as np
from gguf import GGUFReader

def read(path):
    r = GGUFReader(path)
    t = {x.name: np.array(x.data, dtype=np.float64).ravel() for x in r.tensors}
    return {n[: -len(".in_sum2")]: (t[n], t[n[: -len(".in_sum2")] + ".counts"]) for n in t if n.endswith(".in_sum2")}

llama, ours = read(sys.argv[1]), read(sys.argv[2])
same = sorted(llama) == sorted(ours)
counts = same and all((llama[n][1] == ours[n][1]).all() for n in llama)
worst = max((np.abs(ours[n][0] - s) / np.maximum(np.abs(s), 1e-12)).max() for n, (s, _) in llama.items()) if same else float("nan")
lt, tt = float(sys.argv[3]), float(sys.argv[4])
print("| | llama-imatrix | tgi imatrix | ratio (llama / tgi) |")
print("|---|---:|---:|---:|")
print(f"| seconds | {lt:.1f} | {tt:.1f} | {lt / tt:.2f} |")
print(f"\nentries: {len(llama)} (same names: {same}; same counts: {counts}); largest relative difference of a sum: {worst:.2e}")
PY

[[ -n $QUALITY_TEXT ]] || exit 0

# Quality: each pipeline's files against the base model's distributions, scored by its own perplexity tool.
echo
echo "Quality on $(basename "$QUALITY_TEXT"), chunks of $QUALITY_CTX tokens, against $(basename "$MODEL") (each file scored by its own tool)"
echo
"$LLAMA_BIN/llama-perplexity" -m "$MODEL" -f "$QUALITY_TEXT" -c "$QUALITY_CTX" -t "$THREADS" \
    --kl-divergence-base "$WORK/llama-base.kld" >/dev/null 2>&1
"$TGI" perplexity -m "$MODEL" -f "$QUALITY_TEXT" -c "$QUALITY_CTX" -t "$THREADS" \
    --kl-divergence-base "$WORK/tgi-base.kld" --force -q >/dev/null
# Prints "SIZE_BYTES BITS_PER_WEIGHT" of a GGUF file.
size_bpw() {
    python3 - "$1" <<'PY'
import os, sys
from gguf import GGUFReader
r = GGUFReader(sys.argv[1])
print(os.path.getsize(sys.argv[1]), f"{8 * sum(int(t.n_bytes) for t in r.tensors) / sum(int(t.n_elements) for t in r.tensors):.3f}")
PY
}
echo "| file | tool | size (bytes) | bits per weight | perplexity | mean KLD | 99% KLD | same top token |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for entry in $QUALITY_TYPES; do
    t=${entry%+imatrix}
    lm=() tm=()
    if [[ $entry == *+imatrix ]]; then
        lm=(--imatrix "$WORK/llama.imatrix.gguf")
        tm=(--imatrix "$WORK/tgi.imatrix.gguf")
    fi
    lf=$WORK/quality-$entry.llamacpp.gguf tf=$WORK/quality-$entry.tgi.gguf
    "$LLAMA_BIN/llama-quantize" "${lm[@]}" "$MODEL" "$lf" "${t^^}" "$THREADS" >/dev/null 2>&1
    "$TGI" quantize "$MODEL" --type "$t" "${tm[@]}" -o "$tf" --force -q
    read -r lsize lbpw < <(size_bpw "$lf")
    read -r tsize tbpw < <(size_bpw "$tf")
    # llama-perplexity logs through a thread that its exit does not wait for (llama.cpp's common_log, leaked on
    # purpose: ggml-org/llama.cpp#22142), so the end of its output is sometimes lost: run it until the summary's
    # last line is there.
    for _ in 1 2 3 4 5; do
        "$LLAMA_BIN/llama-perplexity" -m "$lf" -f "$QUALITY_TEXT" -c "$QUALITY_CTX" -t "$THREADS" \
            --kl-divergence-base "$WORK/llama-base.kld" --kl-divergence >"$WORK/llama-kld.txt" 2>&1
        grep -q "^Same top p:" "$WORK/llama-kld.txt" && break
    done
    "$TGI" perplexity -m "$tf" -f "$QUALITY_TEXT" -c "$QUALITY_CTX" -t "$THREADS" \
        --kl-divergence-base "$WORK/tgi-base.kld" --kl-divergence --json -q >"$WORK/tgi-kld.json"
    python3 - "$entry" "$WORK/llama-kld.txt" "$WORK/tgi-kld.json" "$lsize $lbpw" "$tsize $tbpw" <<'PY'
import json, re, sys
entry, lt, tj, lsz, tsz = sys.argv[1:]
text = open(lt).read()
def grab(label, pm=True, unit=""):
    num = r"\s*:?\s*([0-9.]+)"
    m = re.search(label + num + (r"\s*±\s*([0-9.]+)" if pm else ""), text)
    return "?" if not m else " ± ".join(m.groups()) + unit
ppl = grab(r"Mean PPL\(Q\)")
kld = grab(r"Mean\s+KLD")
p99 = grab(r"99\.0%\s+KLD", pm=False)
top = grab(r"Same top p", unit=" %")
lsize, lbpw = lsz.split()
print(f"| {entry} | llama.cpp | {lsize} | {lbpw} | {ppl} | {kld} | {p99} | {top} |")
d = json.load(open(tj))
k = d["kl_divergence"]
tsize, tbpw = tsz.split()
print(f"| {entry} | tgi | {tsize} | {tbpw} | {d['perplexity']:.4f} ± {d['stderr']:.4f} | {k['mean']:.6f} ± {k['stderr']:.6f} "
      f"| {k['p99']:.5f} | {100 * k['same_top_p']:.2f} ± {100 * k['same_top_p_stderr']:.2f} % |")
PY
done
