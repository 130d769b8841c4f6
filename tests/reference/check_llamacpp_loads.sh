#!/usr/bin/env bash
# Opt-in check that llama.cpp itself loads the GGUF files `tgi quantize` writes from the
# Hugging Face checkpoints and generates the same greedy text as from llama.cpp's own files
# (tests/reference/llamacpp_greedy.json, recorded by make_llamacpp_refs.py); and that it loads the F32 GGUF files
# of the other families' tiny checkpoints (models/tiny-*/hf) and generates greedily the text `tgi generate`
# does from the same file.
#
# Usage: tests/reference/check_llamacpp_loads.sh LLAMA_BIN_DIR
#   LLAMA_BIN_DIR: a llama.cpp build with llama-simple (this script never builds llama.cpp).
# Exit 0 when every file loads and matches; prints one line per file.
set -euo pipefail
[[ $# -eq 1 ]] || { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "$1" && pwd)
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
REF=$ROOT/tests/reference/llamacpp_greedy.json
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
prompt=$(python3 -c "import json;print(json.load(open('$REF'))['prompt'])")
n=$(python3 -c "import json;print(json.load(open('$REF'))['n_predict'])")
fail=0
for model in stories260k stories-distill-4l; do
    for type in f32 q8_0 q4_k_m; do
        out=$WORK/$model-$type.gguf
        "$TGI" quantize "$ROOT/models/$model/hf" --type "$type" -o "$out" --quiet
        got=$("$BIN/llama-simple" -m "$out" -n "$n" "$prompt" 2>/dev/null)
        want=$(python3 -c "import json;print(json.load(open('$REF'))['models']['$model']['$type']['stdout'], end='')")
        if [[ "$got" == "${want%$'\n'}" ]]; then
            echo "ok    $model $type: $got"
        else
            echo "FAIL  $model $type"; echo "  llama.cpp on tgi's file: $got"; echo "  llama.cpp on its own:    $want"
            fail=1
        fi
    done
done
for family in qwen3 gemma2 gemma3 phi3 mixtral qwen3moe; do
    out=$WORK/tiny-$family-f32.gguf
    "$TGI" quantize "$ROOT/models/tiny-$family/hf" --type f32 -o "$out" --quiet
    got=$("$BIN/llama-simple" -m "$out" -n 16 "$prompt" 2>/dev/null) || { echo "FAIL  tiny-$family: llama.cpp refused it"; fail=1; continue; }
    # llama-simple prints the BOS piece first and the raw bytes of byte tokens; `tgi generate` prints the text
    # with invalid UTF-8 replaced by U+FFFD: the same replacement applied to llama.cpp's bytes.
    got=$(printf '%s' "${got#"<s> "}" | python3 -c 'import sys; sys.stdout.write(sys.stdin.buffer.read().decode("utf-8", "replace"))')
    want="$prompt$("$TGI" generate -m "$out" --temperature 0 --ignore-eos -n 16 "$prompt" 2>/dev/null)"
    if [[ "$got" == "$want" ]]; then
        echo "ok    tiny-$family f32: $got"
    else
        echo "FAIL  tiny-$family f32"; echo "  llama.cpp: $got"; echo "  tgi:       $want"
        fail=1
    fi
done
exit $fail
