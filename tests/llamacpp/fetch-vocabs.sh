#!/usr/bin/env bash
# Fetches llama.cpp's vocabulary-only GGUF files and their tokenizer test vectors (models/ggml-vocab-*) once and
# prints the folder that holds them: from the llama-cpp-python 0.3.36 source package on PyPI (llama.cpp 0c1e570,
# MIT), downloaded with retries and backoff, checked against its SHA-256, and unpacked into TGI_LLAMACPP_DIR
# (default ~/.cache/tgi-llamacpp), outside the checkout, whole or not at all. Never commit the files.
#
#   TGI_LLAMACPP_VOCABS=$(bash tests/llamacpp/fetch-vocabs.sh) cargo test --release -p tgi-engines --test tokenizer_vectors
set -euo pipefail

dir=${TGI_LLAMACPP_DIR:-$HOME/.cache/tgi-llamacpp}
vocabs=$dir/vocabs-0.3.36
sdist=$dir/llama_cpp_python-0.3.36.tar.gz
sha=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
url=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz

if [[ -f $vocabs/.complete ]]; then
    echo "$vocabs"
    exit 0
fi
mkdir -p "$dir"
if ! { [[ -f $sdist ]] && echo "$sha  $sdist" | sha256sum -c --status; }; then
    tmp=$(mktemp "$dir/.sdist.XXXXXX")
    trap 'rm -f "$tmp"' EXIT
    delay=10
    for try in 1 2 3 4 5; do
        if curl -fsSL --retry 3 -o "$tmp" "$url" && echo "$sha  $tmp" | sha256sum -c --status; then
            break
        fi
        [[ $try == 5 ]] && { echo "fetch-vocabs.sh: downloading $url failed 5 times" >&2; exit 1; }
        echo "fetch-vocabs.sh: try $try failed; again in $delay s" >&2
        sleep "$delay"
        delay=$((delay * 2))
    done
    chmod 644 "$tmp"
    mv "$tmp" "$sdist"
    trap - EXIT
fi
staging=$(mktemp -d "$dir/.vocabs.XXXXXX")
trap 'rm -rf "$staging"' EXIT
tar -xzf "$sdist" -C "$staging" --strip-components=4 --wildcards 'llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-*'
touch "$staging/.complete"
rm -rf "$vocabs"
mv "$staging" "$vocabs"
trap - EXIT
echo "$vocabs"
