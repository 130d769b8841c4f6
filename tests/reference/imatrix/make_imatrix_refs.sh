#!/usr/bin/env bash
# Writes the llama-imatrix references tests/imatrix.rs compares `tgi imatrix` with: stories-distill-4l (its F32
# GGUF, the same weights as models/stories-distill-4l/hf) over its calibration text, chunks of 128 tokens, the
# first 24 chunks, the output layer included; the GGUF file, the legacy .dat of the same run, and the perplexity
# llama-imatrix printed. This is how the files here were made:
#
#   bash tests/reference/imatrix/make_imatrix_refs.sh LLAMA_BIN_DIR ../shared/models/stories-distill-4l/stories-distill-4l-f32.gguf
#
# LLAMA_BIN_DIR holds llama.cpp 0c1e570's llama-imatrix (the llama-cpp-python 0.3.36 sdist's vendor/llama.cpp,
# built with cmake).
set -euo pipefail
bin=${1:?usage: make_imatrix_refs.sh LLAMA_BIN_DIR MODEL_F32_GGUF}
gguf=${2:?usage: make_imatrix_refs.sh LLAMA_BIN_DIR MODEL_F32_GGUF}
bin=$(cd "$bin" && pwd)
gguf=$(cd "$(dirname "$gguf")" && pwd)/$(basename "$gguf")
here=$(cd "$(dirname "$0")" && pwd)
# From the repository root, so that the file records the text's path as the repository names it.
cd "$here/../../.."
text=models/stories-distill-4l/text/calibration.txt
args=(-m "$gguf" -f "$text" -c 128 --chunks 24 --process-output -t 2)
log=$(mktemp)
"$bin/llama-imatrix" "${args[@]}" -o "$here/stories-distill-4l.imatrix.gguf" 2>&1 | tee "$log" >/dev/null
"$bin/llama-imatrix" "${args[@]}" --output-format dat -o "$here/stories-distill-4l.imatrix.dat" >/dev/null 2>&1
# The last estimate llama-imatrix printed: "[24]3.1234," (the perplexity over every chunk so far).
ppl=$(grep -o '\[[0-9]*\][0-9.]*' "$log" | tail -1 | sed 's/.*\]//')
printf '{"perplexity": %s, "chunks": 24, "ctx": 128, "llama_cpp": "0c1e570"}\n' "$ppl" > "$here/perplexity.json"
rm -f "$log"
cat "$here/perplexity.json"
