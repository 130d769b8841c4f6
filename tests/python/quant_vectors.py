#!/usr/bin/env python3
"""Writes the GGML quantization test vectors checked by `formats/tests/quant_vectors.rs`.

Inputs: deterministic f32 matrices (raw little-endian `<set>.f32`, `ROWS x COLS`).
Expected encodings: gguf-py's `gguf.quants.quantize` for the types it can quantize (F16, BF16,
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) as `<set>.<type>.bin` (F32 is the input itself).
Expected decodings: random blocks of every block type tgi reads, i-quants included
(`decode.<type>.bin`, scales forced finite)
and gguf-py's `gguf.quants.dequantize` of them (`decode.<type>.f32`).
Everything is listed in `manifest.ggufpy.txt`:

    encode <set> <type> <n>  # <set>.f32 as rows of n values, encoded as <type>, must equal
                             # <set>.<type>.bin
    decode <type>            # decode.<type>.bin decoded must equal decode.<type>.f32 bitwise

K-quant encodings come from llama.cpp's ggml itself, see `kquant_vs_ggml.py`.

Usage: python3 tests/python/quant_vectors.py [--out DIR] [--rows N] [--cols N] [--seed S]
Requires: pip install gguf numpy
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

DEFAULT_OUT = Path(__file__).resolve().parents[2] / "formats/tests/data/quant_vectors"

# Types gguf-py can encode, with the names ggml prints (and GgmlType::parse accepts).
ENCODE_TYPES = {
    "f16": T.F16,
    "bf16": T.BF16,
    "q8_0": T.Q8_0,
    "q4_0": T.Q4_0,
    "q4_1": T.Q4_1,
    "q5_0": T.Q5_0,
    "q5_1": T.Q5_1,
}

# Block types for the decoder vectors: (gguf type, values per block, bytes per block,
# byte offsets of the fp16 scale fields, number of random blocks).
DECODE_TYPES = {
    "q4_0": (T.Q4_0, 32, 18, [0], 32),
    "q4_1": (T.Q4_1, 32, 20, [0, 2], 32),
    "q5_0": (T.Q5_0, 32, 22, [0], 32),
    "q5_1": (T.Q5_1, 32, 24, [0, 2], 32),
    "q8_0": (T.Q8_0, 32, 34, [0], 32),
    "q2_K": (T.Q2_K, 256, 84, [80, 82], 4),
    "q3_K": (T.Q3_K, 256, 110, [108], 4),
    "q4_K": (T.Q4_K, 256, 144, [0, 2], 4),
    "q5_K": (T.Q5_K, 256, 176, [0, 2], 4),
    "q6_K": (T.Q6_K, 256, 210, [208], 4),
    "iq2_xxs": (T.IQ2_XXS, 256, 66, [0], 4),
    "iq2_xs": (T.IQ2_XS, 256, 74, [0], 4),
    "iq2_s": (T.IQ2_S, 256, 82, [0], 4),
    "iq3_xxs": (T.IQ3_XXS, 256, 98, [0], 4),
    "iq3_s": (T.IQ3_S, 256, 110, [0], 4),
    "iq1_s": (T.IQ1_S, 256, 50, [0], 4),
    "iq1_m": (T.IQ1_M, 256, 56, [], 4),  # fp16 scale spread over the scales' top nibbles
}


def datasets(rows: int, cols: int, seed: int) -> dict[str, np.ndarray]:
    """The input matrices, all float32 [rows, cols] (the mixed set has one row per kind)."""
    rng = np.random.default_rng(seed)
    shape = (rows, cols)
    sets: dict[str, np.ndarray] = {}
    sets["normal"] = rng.standard_normal(shape) * 0.02
    sets["laplace"] = rng.laplace(0.0, 0.01, shape)
    sets["cubed"] = rng.standard_normal(shape) ** 3
    sets["integer"] = rng.integers(-8, 9, shape).astype(np.float64)
    sets["zeros"] = np.zeros(shape)
    sets["tiny"] = rng.standard_normal(shape) * 1e-30

    outlier = rng.standard_normal(shape) * 0.05
    for r in range(rows):
        outlier[r, (r * 97 + 13) % cols] = (1e4 if r % 2 == 0 else -300.0) * (1 + r)
    sets["outlier"] = outlier

    onesided = np.abs(rng.standard_normal(shape))
    onesided[1::2] *= -1.0  # odd rows negative only
    onesided[2::4] += 0.5  # some rows bounded away from zero
    sets["onesided"] = onesided * 0.03

    kinds = [
        lambda: np.full(cols, 0.5),  # constant
        lambda: np.full(cols, -0.25),
        lambda: np.linspace(-1.0, 1.0, cols),  # ramp
        lambda: np.where(np.arange(cols) % 2 == 0, 1.0, -1.0) * 0.01,  # alternating
        lambda: rng.standard_normal(cols) * 1e3,  # large
        lambda: np.concatenate([np.zeros(cols // 2), rng.standard_normal(cols - cols // 2)]),
        # sparse; +0.0 only: for a block mixing -0.0 and +0.0 ggml's Q4_1/Q5_1 min is the first
        # zero seen (C `v < min`) while numpy's min() may return the other sign, so gguf-py
        # differs from ggml there (in the sign bit of m). The Rust unit tests cover that case.
        lambda: np.where(rng.random(cols) < 0.1, rng.standard_normal(cols), 0.0),
        lambda: rng.random(cols),  # uniform [0, 1)
        lambda: np.round(rng.standard_normal(cols) * 4) / 8,  # coarse grid
        lambda: rng.standard_normal(cols) * 1e-6,  # fp16-subnormal scales
    ]
    sets["mixed"] = np.stack([kind() for kind in kinds])  # one row of each kind
    return {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in sets.items()}


def random_blocks(rng: np.random.Generator, block_bytes: int, scale_offsets: list[int], n: int) -> np.ndarray:
    """n random blocks whose fp16 fields hold finite, moderately sized values."""
    blocks = rng.integers(0, 256, (n, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        vals = (rng.standard_normal(n) * 0.01).astype(np.float16)
        vals[0] = 0.0  # one block with a zero scale
        vals[1] = np.float16(6e-8)  # and one with a subnormal scale
        blocks[:, off : off + 2] = vals.view(np.uint8).reshape(n, 2)
    return blocks


def spread_iq1_m_scale(rng: np.random.Generator, blocks: np.ndarray) -> None:
    """Puts a finite fp16 scale into the top nibbles of IQ1_M's four u16 scales (bytes 48..56)."""
    vals = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16)
    vals[0] = 0.0
    vals[1] = np.float16(6e-8)
    bits = vals.view(np.uint16)
    for i in range(4):
        nib = ((bits >> (4 * i)) & 0xF).astype(np.uint8)
        blocks[:, 49 + 2 * i] = (blocks[:, 49 + 2 * i] & 0x0F) | (nib << 4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--cols", type=int, default=512)
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()
    assert args.cols % 256 == 0, "row length must be a multiple of 256 (the K-quant block)"
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    manifest = []
    for name, data in datasets(args.rows, args.cols, args.seed).items():
        (out / f"{name}.f32").write_bytes(data.astype("<f4").tobytes())
        for tname, qtype in ENCODE_TYPES.items():
            enc = np.ascontiguousarray(quantize(data, qtype))
            (out / f"{name}.{tname}.bin").write_bytes(enc.tobytes())
            manifest.append(f"encode {name} {tname} {data.shape[1]}")

    rng = np.random.default_rng(7)
    for tname, (qtype, bs, nbytes, offs, nblocks) in DECODE_TYPES.items():
        blocks = random_blocks(rng, nbytes, offs, nblocks)
        if qtype == T.IQ1_M:
            spread_iq1_m_scale(rng, blocks)
        dec = dequantize(blocks.reshape(1, -1), qtype).astype("<f4")
        assert dec.size == nblocks * bs
        assert np.isfinite(dec).all()
        (out / f"decode.{tname}.bin").write_bytes(blocks.tobytes())
        (out / f"decode.{tname}.f32").write_bytes(dec.tobytes())
        manifest.append(f"decode {tname}")

    (out / "manifest.ggufpy.txt").write_text(
        "# written by tests/python/quant_vectors.py (gguf-py reference)\n" + "\n".join(manifest) + "\n"
    )
    print(f"wrote {len(manifest)} vectors to {out}")


if __name__ == "__main__":
    main()
