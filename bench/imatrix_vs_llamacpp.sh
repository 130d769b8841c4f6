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
