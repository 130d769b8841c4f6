#!/usr/bin/env python3
"""Writes the importance-matrix quantization test vectors from llama.cpp's own ggml (`libggml-base.so`, via ctypes).

For every input `<set>.f32` listed in `manifest.ggufpy.txt` (run `quant_vectors.py` first) this draws a
deterministic importance vector of one row (`<set>.imatrix.f32`: heavy-tailed, with zeros and a few columns a
thousand times the rest) and calls `ggml_quantize_chunk(type, src, dst, start=0, nrows, n_per_row, imatrix)` --
what `llama-quantize --imatrix` does for a tensor with an entry -- writing `<set>.<type>.imatrix.bin` for the
nine types whose encoder uses the matrix (Q2_K..Q6_K, Q4_0..Q5_1), listed in `manifest.imatrix.txt` as
`encode_weighted SET TYPE N_PER_ROW`.

Usage: python3 tests/python/imatrix_vs_ggml.py [--lib PATH/libggml-base.so] [--dir DIR]
"""

from __future__ import annotations

import ctypes
import sys

import numpy as np

from kquant_vs_ggml import TYPES, open_vectors

WEIGHTED = ["q2_K", "q3_K", "q4_K", "q5_K", "q6_K", "q4_0", "q4_1", "q5_0", "q5_1"]


def importance(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = (rng.random(n) ** 3 * 10.0).astype(np.float32)
    w[::7] = 0.0
    w[5::37] = 1000.0
    return w


def quantize_weighted(lib: ctypes.CDLL, tname: str, data: np.ndarray, n_per_row: int, qw: np.ndarray) -> bytes:
    tid, bsize, bvals = TYPES[tname]
    nrows = data.size // n_per_row
    dst = np.zeros(data.size // bvals * bsize, dtype=np.uint8)
    src = np.ascontiguousarray(data, dtype=np.float32)
    w = np.ascontiguousarray(qw, dtype=np.float32)
    n = lib.ggml_quantize_chunk(
        tid, src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), dst.ctypes.data, 0, nrows, n_per_row, w.ctypes.data
    )
    assert n == dst.size, (tname, n, dst.size)
    return dst.tobytes()


def main() -> None:
    lib, lib_path, d, sets = open_vectors(__doc__.split("\n")[0])
    manifest = []
    for seed, (name, n_per_row) in enumerate(sets.items()):
        data = np.fromfile(d / f"{name}.f32", dtype="<f4")
        qw = importance(seed, n_per_row)
        qw.astype("<f4").tofile(d / f"{name}.imatrix.f32")
        for tname in WEIGHTED:
            (d / f"{name}.{tname}.imatrix.bin").write_bytes(quantize_weighted(lib, tname, data, n_per_row, qw))
            manifest.append(f"encode_weighted {name} {tname} {n_per_row}")
    (d / "manifest.imatrix.txt").write_text(
        f"# written by tests/python/imatrix_vs_ggml.py from {lib_path.name} (ggml_quantize_chunk with an imatrix)\n"
        + "\n".join(manifest)
        + "\n"
    )
    print(f"wrote {len(manifest)} importance-matrix vectors")
    sys.exit(0)


if __name__ == "__main__":
    main()
