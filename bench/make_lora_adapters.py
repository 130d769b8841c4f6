#!/usr/bin/env python3
"""Write random PEFT LoRA adapters (adapter_config.json + adapter_model.safetensors) for a Llama-shaped Hugging Face
checkpoint, without torch: numpy and the safetensors layout written by hand. For bench/lora.sh.

    python3 bench/make_lora_adapters.py CHECKPOINT_DIR OUT_DIR [--count 16] [--rank 16] [--seed 0]

Each adapter OUT_DIR/a<i> has rank-`rank` factors on all seven linear projections (q, k, v, o, gate, up, down)
of every layer, float32, normal with std 0.01 (seeded by --seed and i); lora_alpha = 2 * rank.
"""

import argparse
import json
import struct
from pathlib import Path

import numpy as np

MODULES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def shapes(cfg):
    """(out, in) of each projection."""
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    hd = cfg.get("head_dim") or h // heads
    q, kv = heads * hd, cfg.get("num_key_value_heads", heads) * hd
    return {"self_attn.q_proj": (q, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
            "self_attn.o_proj": (h, q), "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h), "mlp.down_proj": (h, i)}


def write_safetensors(path, tensors):
    """The safetensors layout: u64 header length, JSON header, then the raw little-endian data."""
    header, offset = {}, 0
    for name, t in tensors:
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, t in tensors:
            f.write(np.ascontiguousarray(t, dtype="<f4").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cfg = json.loads((args.checkpoint / "config.json").read_text())
    dims = shapes(cfg)
    for a in range(args.count):
        rng = np.random.default_rng(args.seed * 1000 + a)
        tensors = []
        for layer in range(cfg["num_hidden_layers"]):
            for m in MODULES:
                out, inp = dims[m]
                prefix = f"base_model.model.model.layers.{layer}.{m}"
                tensors.append((f"{prefix}.lora_A.weight", rng.normal(0, 0.01, (args.rank, inp)).astype(np.float32)))
                tensors.append((f"{prefix}.lora_B.weight", rng.normal(0, 0.01, (out, args.rank)).astype(np.float32)))
        d = args.out / f"a{a}"
        d.mkdir(parents=True, exist_ok=True)
        write_safetensors(d / "adapter_model.safetensors", tensors)
        config = {"peft_type": "LORA", "r": args.rank, "lora_alpha": 2 * args.rank, "target_modules": [m.split(".")[1] for m in MODULES],
                  "bias": "none", "base_model_name_or_path": str(args.checkpoint)}
        (d / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
        print(d)


if __name__ == "__main__":
    main()
