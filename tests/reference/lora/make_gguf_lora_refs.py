#!/usr/bin/env python3
"""Convert the committed PEFT adapters of tests/reference/lora/ to llama.cpp GGUF LoRA adapters with llama.cpp's
own `convert_lora_to_gguf.py`, for tgi's test that a GGUF adapter gives the same logits as its PEFT original.

This is how tests/reference/lora/*.gguf were made (llama.cpp 0c1e570, from the llama-cpp-python 0.3.36 source
package that tests/llamacpp/fetch-vocabs.sh caches in ~/.cache/tgi-llamacpp):

    mkdir -p /root/llamacpp-src && tar -xzf ~/.cache/tgi-llamacpp/llama_cpp_python-0.3.36.tar.gz \\
        -C /root/llamacpp-src --strip-components=3 --wildcards \\
        'llama_cpp_python-0.3.36/vendor/llama.cpp/convert_*.py' \\
        'llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py/*' \\
        'llama_cpp_python-0.3.36/vendor/llama.cpp/conversion/*'
    python3 -m venv /root/venv-lora && /root/venv-lora/bin/pip install torch transformers peft numpy safetensors \\
        sentencepiece
    /root/venv-lora/bin/python tests/reference/lora/make_gguf_lora_refs.py --llama-cpp /root/llamacpp-src

Each adapter in ADAPTERS is converted as

    python convert_lora_to_gguf.py --base models/<base>/hf --outtype f32 \\
        --outfile tests/reference/lora/<name>.gguf tests/reference/lora/<name>

f32 keeps the factors exact, so the test's 1e-4 bound on the logits holds. The rsLoRA adapter (s260k-all-r8-rs)
is left out: convert_lora_to_gguf.py drops `use_rslora` (llama.cpp scales every adapter by alpha / rank), so its
GGUF would not be the same adapter as peft's.
"""

import argparse
import subprocess
import sys
from pathlib import Path

# name: base model (the three non-rsLoRA stories260k adapters; together they cover all seven projections)
ADAPTERS = {
    "s260k-qv-r4": "stories260k",
    "s260k-mlp-r2": "stories260k",
    "s260k-kd-r16": "stories260k",
}


def main():
    here = Path(__file__).resolve().parent
    root = here.parent.parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-cpp", type=Path, required=True, help="llama.cpp source holding convert_lora_to_gguf.py")
    ap.add_argument("--models-dir", type=Path, default=root / "models")
    args = ap.parse_args()
    script = args.llama_cpp / "convert_lora_to_gguf.py"
    for name, base in ADAPTERS.items():
        out = here / f"{name}.gguf"
        cmd = [sys.executable, str(script), "--base", str(args.models_dir / base / "hf"), "--outtype", "f32",
               "--outfile", str(out), str(here / name)]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
