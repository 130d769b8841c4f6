#!/usr/bin/env bash
# Writes the i-quant fixtures tests/iquant_engine.rs runs: stories-distill-4l quantized by llama-quantize with the
# committed importance matrix (tests/reference/imatrix/) into
#   mix.gguf    preset IQ1_M with one i-quant per kind of tensor, so that every i-quant tgi reads appears:
#               attn_q IQ2_XXS, attn_k IQ2_XS, attn_v IQ3_XXS, attn_output IQ3_S, ffn_gate IQ2_S, ffn_up IQ1_S,
#               ffn_down IQ1_M
#   iq2_m.gguf  preset IQ2_M as published (IQ2_S and IQ3_S, a Q5_K output)
# and perplexity.json: llama-perplexity's final estimate for each on the held-out text (-c 128 --chunks 32).
#
#   bash tests/reference/iq/make_iq_refs.sh LLAMA_BIN_DIR ../shared/models/stories-distill-4l/stories-distill-4l-f32.gguf
#
# LLAMA_BIN_DIR holds llama.cpp 0c1e570's llama-quantize and llama-perplexity (the llama-cpp-python 0.3.36 sdist's
# vendor/llama.cpp, built with cmake).
set -euo pipefail
bin=${1:?usage: make_iq_refs.sh LLAMA_BIN_DIR MODEL_F32_GGUF}
gguf=${2:?usage: make_iq_refs.sh LLAMA_BIN_DIR MODEL_F32_GGUF}
bin=$(cd "$bin" && pwd)
gguf=$(cd "$(dirname "$gguf")" && pwd)/$(basename "$gguf")
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
imatrix=tests/reference/imatrix/stories-distill-4l.imatrix.gguf
text=models/stories-distill-4l/text/heldout.txt
mix=(--tensor-type attn_q=iq2_xxs --tensor-type attn_k=iq2_xs --tensor-type attn_v=iq3_xxs
    --tensor-type attn_output=iq3_s --tensor-type ffn_gate=iq2_s --tensor-type ffn_up=iq1_s
    --tensor-type ffn_down=iq1_m)
"$bin/llama-quantize" --imatrix "$imatrix" "${mix[@]}" "$gguf" "$here/mix.gguf" IQ1_M 2 >/dev/null 2>&1
"$bin/llama-quantize" --imatrix "$imatrix" "$gguf" "$here/iq2_m.gguf" IQ2_M 2 >/dev/null 2>&1

# The final estimate, retried: llama.cpp's log thread sometimes loses the last line at exit (issue #22142).
ppl() {
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        line=$("$bin/llama-perplexity" -m "$1" -f "$text" -c 128 --chunks 32 -b 512 -t 2 2>&1 |
            grep -o 'Final estimate: PPL = [0-9.]* +/- [0-9.]*' || true)
        if [ -n "$line" ]; then
            echo "$line" | awk '{print "{\"ppl\": " $5 ", \"error\": " $7 "}"}'
            return
        fi
    done
    echo "no final estimate from llama-perplexity" >&2
    exit 1
}
{
    echo '{"llama_cpp": "0c1e570", "text": "'"$text"'", "args": ["-c", "128", "--chunks", "32", "-b", "512"],'
    echo ' "files": {"mix.gguf": '"$(ppl "$here/mix.gguf")"', "iq2_m.gguf": '"$(ppl "$here/iq2_m.gguf")"'}}'
} > "$here/perplexity.json"
cat "$here/perplexity.json"
