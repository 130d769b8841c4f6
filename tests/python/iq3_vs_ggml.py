#!/usr/bin/env python3
"""Writes the IQ3_XXS / IQ3_S encoder vectors from llama.cpp's own ggml (`libggml-base.so`, via ctypes).

For every input `<set>.f32` listed in `manifest.ggufpy.txt` (run `quant_vectors.py` and
`imatrix_vs_ggml.py` first) this calls `ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix)`
for IQ3_XXS and IQ3_S, once without an importance matrix (`<set>.<type>.bin`; ggml accepts a NULL one for
these two) and once with `<set>.imatrix.f32` (`<set>.<type>.imatrix.bin`). Their decoder vectors come from
`iq_grids.py`'s reference blocks. Everything is listed in `manifest.iq3.txt`.

Usage: python3 tests/python/iq3_vs_ggml.py [--lib PATH/libggml-base.so] [--dir DIR]
"""

from __future__ import annotations

import numpy as np

from imatrix_vs_ggml import quantize_weighted
from kquant_vs_ggml import DECODE_TYPES, TYPES, open_vectors, quantize

# (type, whether ggml encodes it without an importance matrix)
IQ3 = [("iq3_xxs", True), ("iq3_s", True)]


def write_vectors(family: str, types: list[tuple[str, bool]], label: str) -> None:
    """Writes `<set>.<type>[.imatrix].bin` for every encode set and `manifest.<family>.txt` (the CLI: --lib, --dir)."""
    lib, lib_path, d, sets = open_vectors(f"Writes the {label} encoder vectors from ggml's libggml-base.so.")
    for tname, _ in types:
        TYPES[tname] = DECODE_TYPES[tname]

    manifest = []
    for name, n_per_row in sets.items():
        data = np.fromfile(d / f"{name}.f32", dtype="<f4")
        qw = np.fromfile(d / f"{name}.imatrix.f32", dtype="<f4")
        for tname, plain in types:
            if plain:
                (d / f"{name}.{tname}.bin").write_bytes(quantize(lib, tname, data, n_per_row))
                manifest.append(f"encode {name} {tname} {n_per_row}")
            (d / f"{name}.{tname}.imatrix.bin").write_bytes(quantize_weighted(lib, tname, data, n_per_row, qw))
            manifest.append(f"encode_weighted {name} {tname} {n_per_row}")

    (d / f"manifest.{family}.txt").write_text(
        f"# written by tests/python/{family}_vs_ggml.py from {lib_path.name} (ggml_quantize_chunk)\n"
        + "\n".join(manifest)
        + "\n"
    )
    print(f"wrote {len(manifest)} {label} vectors")


if __name__ == "__main__":
    write_vectors("iq3", IQ3, "IQ3")
