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

import argparse
from pathlib import Path

import numpy as np

from imatrix_vs_ggml import quantize_weighted
from kquant_vs_ggml import DECODE_TYPES, DEFAULT_DIR, TYPES, find_lib, load, quantize

# (type, whether ggml encodes it without an importance matrix)
IQ3 = [("iq3_xxs", True), ("iq3_s", True)]


def write_vectors(family: str, types: list[tuple[str, bool]], label: str) -> None:
    """Writes `<set>.<type>[.imatrix].bin` for every encode set and `manifest.<family>.txt` (the CLI: --lib, --dir)."""
    ap = argparse.ArgumentParser(description=f"Writes the {label} encoder vectors from ggml's libggml-base.so.")
    ap.add_argument("--lib")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = ap.parse_args()
    lib_path = find_lib(args.lib)
    lib = load(lib_path)
    d: Path = args.dir
    for tname, _ in types:
        TYPES[tname] = DECODE_TYPES[tname]
    sets = [l.split() for l in (d / "manifest.ggufpy.txt").read_text().splitlines()]
    sets = dict((p[1], int(p[3])) for p in sets if p and p[0] == "encode")

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
