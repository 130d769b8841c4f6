#!/usr/bin/env python3
"""Writes the IQ4_NL / IQ4_XS test vectors from llama.cpp's own ggml (`libggml-base.so`, via ctypes).

For every input `<set>.f32` listed in `manifest.ggufpy.txt` (run `quant_vectors.py` and
`imatrix_vs_ggml.py` first) this calls `ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix)`
for IQ4_NL and IQ4_XS, once without an importance matrix (`<set>.<type>.bin`, what llama-quantize writes
without `--imatrix`) and once with `<set>.imatrix.f32` (`<set>.<type>.imatrix.bin`). It also draws random
blocks (`decode.<type>.bin`, fp16 scale forced finite, one zero and one subnormal) and decodes them with
ggml's `to_float` (`decode.<type>.f32`), failing unless gguf-py's `gguf.quants.dequantize` gives the same
bits. For IQ4_NL it also records the type's `from_float_ref` (`quantize_row_iq4_nl_ref`, the row encoder
ggml's set_rows/cpy write a KV cache with: ntry -1, unlike ggml_quantize_chunk's 7) of every set
(`<set>.iq4_nl.from_float.bin`). ggml leaves the levels of a block whose largest magnitude is below
GROUP_MAX_EPS (1e-15) as whatever its level buffer last held (the previous block's, or uninitialized
stack): such a block's scale is 0, so it decodes to zeros whatever its nibbles; the script writes the middle
level (0x88) there, as tgi does, and checks the scale is 0. Everything is listed in `manifest.iq4.txt`.

Usage: python3 tests/python/iq4_vs_ggml.py [--lib PATH/libggml-base.so] [--dir DIR]
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np
from gguf import GGMLQuantizationType as T

from imatrix_vs_ggml import quantize_weighted
from kquant_vs_ggml import TYPES, open_vectors, quantize, write_decode_vector
from quant_vectors import random_blocks

# name: (ggml id, bytes per block, values per block), gguf-py type, random blocks to decode.
IQ4 = {
    "iq4_nl": ((20, 18, 32), T.IQ4_NL, 32),
    "iq4_xs": ((23, 136, 256), T.IQ4_XS, 4),
}

# ggml's GROUP_MAX_EPS: blocks below it get a zero scale and levels ggml does not write.
GROUP_MAX_EPS = 1e-15


def quantize_from_float(lib: ctypes.CDLL, data: np.ndarray) -> bytes:
    """IQ4_NL's `from_float_ref` of `data`, the unwritten levels of all-but-zero blocks set to 0x88."""
    (tid, nbytes, nvals), _, _ = IQ4["iq4_nl"]
    src = np.ascontiguousarray(data, dtype=np.float32)
    dst = np.zeros(src.size // nvals * nbytes, dtype=np.uint8)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
    fn(lib.ggml_get_type_traits(tid).contents.from_float_ref)(src.ctypes.data, dst.ctypes.data, src.size)
    blocks = dst.reshape(-1, nbytes)
    for b, x in zip(blocks, src.reshape(-1, nvals)):
        if np.abs(x).max() < GROUP_MAX_EPS:
            assert b[0] == 0 and b[1] == 0, "an all-but-zero block has scale 0"
            b[2:] = 0x88
    return blocks.tobytes()


def main() -> None:
    lib, lib_path, d, sets = open_vectors(__doc__.split("\n")[0])
    for tname, (geometry, _, _) in IQ4.items():
        TYPES[tname] = geometry

    manifest = []
    for name, n_per_row in sets.items():
        data = np.fromfile(d / f"{name}.f32", dtype="<f4")
        qw = np.fromfile(d / f"{name}.imatrix.f32", dtype="<f4")
        for tname in IQ4:
            (d / f"{name}.{tname}.bin").write_bytes(quantize(lib, tname, data, n_per_row))
            manifest.append(f"encode {name} {tname} {n_per_row}")
            (d / f"{name}.{tname}.imatrix.bin").write_bytes(quantize_weighted(lib, tname, data, n_per_row, qw))
            manifest.append(f"encode_weighted {name} {tname} {n_per_row}")
        (d / f"{name}.iq4_nl.from_float.bin").write_bytes(quantize_from_float(lib, data))
        manifest.append(f"encode_from_float {name} iq4_nl {n_per_row}")

    failures = 0
    rng = np.random.default_rng(20)
    for tname, ((_, nbytes, _), qtype, nblocks) in IQ4.items():
        blocks = random_blocks(rng, nbytes, [0], nblocks)
        failures += not write_decode_vector(lib, d, tname, blocks, qtype)
        manifest.append(f"decode {tname}")

    (d / "manifest.iq4.txt").write_text(
        f"# written by tests/python/iq4_vs_ggml.py from {lib_path.name} (ggml_quantize_chunk, from_float_ref, to_float; gguf-py agrees)\n"
        + "\n".join(manifest)
        + "\n"
    )
    print(f"wrote {len(manifest)} IQ4 vectors; {failures} cross-check failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
