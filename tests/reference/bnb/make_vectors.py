#!/usr/bin/env python3
"""Reference vectors for tgi's bitsandbytes 4-bit codec (formats/src/bnb), written by bitsandbytes itself.

Runs bitsandbytes.functional.quantize_4bit / dequantize_4bit on CPU for random tensors of several
shapes, dtypes, block sizes and both quant types, with and without double quantization
(compress_statistics), and writes inputs and outputs to vectors.safetensors beside this script.
formats/tests/bnb_vectors.rs checks tgi's codec against them (no torch needed there).

Needs torch + bitsandbytes (CPU): /work/refs-tmp/venv/bin/python tests/reference/bnb/make_vectors.py
Measured with torch 2.15.0, bitsandbytes 0.50.2, AVX2 CPU (torch.backends.cpu.get_cpu_capability()).
"""

import json
import os
import sys

import numpy as np
import torch
import bitsandbytes
import bitsandbytes.functional as F
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))

# name, shape, dtype, blocksize, distribution
CASES = [
    ("f16_64x128_b64", (64, 128), torch.float16, 64, "normal"),
    ("f16_33x70_b64", (33, 70), torch.float16, 64, "normal"),  # 2310: partial last block
    ("f32_7x9_b64", (7, 9), torch.float32, 64, "normal"),  # 63: odd count, one partial block
    ("bf16_96x259_b64", (96, 259), torch.bfloat16, 64, "laplace"),  # odd cols; 389 blocks: 2 nested blocks
    ("f32_40x100_b128", (40, 100), torch.float32, 128, "uniform"),
    ("f16_100x150_b128", (100, 150), torch.float16, 128, "special"),  # zero blocks, exact maxima, midpoints
    ("bf16_160x203_b64", (160, 203), torch.bfloat16, 64, "normal"),  # 508 blocks: 2 nested blocks
    ("f32_5x13_b32", (5, 13), torch.float32, 32, "normal"),
    ("f16_64x64_b256", (64, 64), torch.float16, 256, "normal"),
]


def make_input(shape, dtype, dist, rng):
    n = int(np.prod(shape))
    if dist == "normal":
        x = rng.standard_normal(n) * 0.02
    elif dist == "laplace":
        x = rng.laplace(size=n) * 0.05
    elif dist == "uniform":
        x = rng.uniform(-3, 3, n)
    else:
        x = rng.standard_normal(n) * 0.1
        x[:128] = 0.0  # a whole zero block
        x[128:256] = 0.5 * rng.integers(-2, 3, 128)  # values at exact code points / midpoints
        code = F.get_4bit_type("nf4", device="cpu").numpy()
        mids = (code[:-1] + code[1:]) / 2
        x[256:256 + 15] = mids  # with a block max of 1.0 below: exactly on the midpoints
        x[256 + 15] = 1.0
        x[-5:] = 0.0  # the partial last block (15000 % 128 = 24) partly zero
    return torch.from_numpy(x.astype(np.float32)).to(dtype).reshape(shape)


def mean_vectors(rng, tensors):
    """torch's float32 mean of absmax-like arrays, for tgi's emulation of it."""
    lengths = list(range(1, 80)) + [95, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1000, 1024, 2047, 4096,
                                    5000]
    for n in lengths:
        a = (rng.random(n) * rng.choice([0.01, 0.1, 2.0])).astype(np.float32)
        t = torch.from_numpy(a)
        tensors[f"mean.{n}.x"] = t
        tensors[f"mean.{n}.mean"] = t.mean().reshape(1)
    return lengths


def main():
    torch.set_num_threads(1)
    rng = np.random.default_rng(20261130)
    tensors = {}
    manifest = {"bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__,
                "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cases": []}
    for name, shape, dtype, bs, dist in CASES:
        x = make_input(shape, dtype, dist, rng)
        tensors[f"{name}.x"] = x.contiguous()
        for qt in ("nf4", "fp4"):
            for dq in (False, True):
                key = f"{name}.{qt}.{'dq' if dq else 'plain'}"
                packed, state = F.quantize_4bit(x, blocksize=bs, quant_type=qt, compress_statistics=dq)
                tensors[f"{key}.packed"] = packed.contiguous()
                tensors[f"{key}.absmax"] = state.absmax.contiguous()
                tensors[f"{key}.quant_map"] = state.code.contiguous()
                if dq:
                    tensors[f"{key}.nested_absmax"] = state.state2.absmax.contiguous()
                    tensors[f"{key}.nested_quant_map"] = state.state2.code.contiguous()
                    tensors[f"{key}.offset"] = state.offset.reshape(1).float()
                    # the decoded absmax bitsandbytes uses for dequantization
                    dec = F.dequantize_blockwise(state.absmax, state.state2) + state.offset
                    tensors[f"{key}.absmax_decoded"] = dec.float().contiguous()
                    packed_dict = state.as_dict(packed=True)
                    qs = packed_dict[f"quant_state.bitsandbytes__{qt}"]
                    tensors[f"{key}.quant_state"] = qs.contiguous()
                else:
                    packed_dict = state.as_dict(packed=True)
                    tensors[f"{key}.quant_state"] = packed_dict[f"quant_state.bitsandbytes__{qt}"].contiguous()
                out = F.dequantize_4bit(packed, state)
                assert out.dtype == dtype and tuple(out.shape) == tuple(shape)
                tensors[f"{key}.dequant"] = out.contiguous()
                manifest["cases"].append({"key": key, "input": f"{name}.x", "shape": list(shape),
                                          "dtype": str(dtype).replace("torch.", ""), "blocksize": bs,
                                          "quant_type": qt, "double_quant": dq})
    manifest["mean_lengths"] = mean_vectors(rng, tensors)
    save_file(tensors, os.path.join(HERE, "vectors.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(HERE, "vectors.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print(f"{len(manifest['cases'])} cases, {len(tensors)} tensors, "
          f"{os.path.getsize(os.path.join(HERE, 'vectors.safetensors'))} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
