#!/usr/bin/env python3
"""Record transformers + bitsandbytes logits of the bundled model quantized to NF4 and FP4, for tgi's engine test
(tests/bnb_engine.rs). This is how tests/reference/bnb/ was made:

    /work/refs-tmp/venv/bin/python tests/reference/make_bnb_refs.py

For each 4-bit type: `LlamaForCausalLM.from_pretrained(models/stories260k/hf, quantization_config=
BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=TYPE, bnb_4bit_use_double_quant=True,
bnb_4bit_compute_dtype=float32), device_map="cpu", attn_implementation="eager")`, saved with `save_pretrained` to
tests/reference/bnb/stories260k-TYPE/ (with the tokenizer files), then reloaded from there (as a pre-quantized
checkpoint) and run on the prompts below: `last_logits` (logits at the last prompt position, full vocabulary)
and `greedy_ids` (16 tokens by argmax over full forward passes without a KV cache). bnb_logits.json also records
the versions and the SHA-256 of each saved model.safetensors.

Needs: torch, transformers, bitsandbytes (CPU), safetensors. Runs in seconds.
"""

import hashlib
import json
import platform
import shutil
from pathlib import Path

import bitsandbytes
import torch
import transformers
from transformers import AutoTokenizer, BitsAndBytesConfig, LlamaForCausalLM

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "models/stories260k/hf"
OUT = ROOT / "tests/reference/bnb"
PROMPTS = ["Once upon a time", "Lily and Ben were playing in the", " Tom had a big red ball. He"]
N_GREEDY = 16
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"]


def sha256_file(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@torch.no_grad()
def run(model, ids):
    seq = list(ids)
    last = None
    for i in range(N_GREEDY):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1].to(torch.float32)
        if i == 0:
            last = logits
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids) :], [float(x) for x in last.numpy()]


def main():
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(SRC)
    out = {
        "generator": "tests/reference/make_bnb_refs.py",
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "bitsandbytes": bitsandbytes.__version__,
            "python": platform.python_version(),
        },
        "source": "models/stories260k/hf",
        "models": {},
    }
    for qt in ["nf4", "fp4"]:
        cfg = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=qt,
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.float32,
        )
        m = LlamaForCausalLM.from_pretrained(
            SRC, quantization_config=cfg, device_map="cpu", attn_implementation="eager", dtype=torch.float32
        )
        dst = OUT / f"stories260k-{qt}"
        if dst.exists():
            shutil.rmtree(dst)
        m.save_pretrained(dst)
        for f in TOKENIZER_FILES:
            if (SRC / f).exists() and not (dst / f).exists():
                shutil.copy(SRC / f, dst / f)
        del m
        m = LlamaForCausalLM.from_pretrained(dst, device_map="cpu", attn_implementation="eager")
        prompts = []
        for p in PROMPTS:
            ids = tok(p)["input_ids"]
            greedy, last = run(m, ids)
            prompts.append({"prompt": p, "prompt_ids": ids, "greedy_ids": greedy, "last_logits": last})
        out["models"][qt] = {
            "dir": f"tests/reference/bnb/stories260k-{qt}",
            "model_safetensors_sha256": sha256_file(dst / "model.safetensors"),
            "prompts": prompts,
        }
        print(qt, [p["greedy_ids"][:8] for p in prompts])
    (OUT / "bnb_logits.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
