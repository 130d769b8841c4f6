#!/usr/bin/env python3
"""Writes the TQ1_0 / TQ2_0 (ternary) test vectors from llama.cpp's own ggml (`libggml-base.so`, via ctypes).

For every input `<set>.f32` listed in `manifest.ggufpy.txt` (run `quant_vectors.py` first) this calls
`ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, NULL)` for TQ1_0 and TQ2_0 (`<set>.<type>.bin`, what
llama-quantize writes; ggml ignores an importance matrix for both) and reports whether gguf-py's
`gguf.quants.quantize` writes the same bytes. It also draws random blocks (`decode.<type>.bin`, the fp16 scale
at the block's end forced finite, one zero and one subnormal) and decodes them with ggml's `to_float`
(`decode.<type>.f32`), failing unless gguf-py's `gguf.quants.dequantize` gives the same bits. TQ2_0's random
blocks hold the unused level 3 too (it decodes to 2·d in both). Everything is listed in `manifest.tq.txt`.

Usage: python3 tests/python/tq_vs_ggml.py [--lib PATH/libggml-base.so] [--dir DIR]
"""

from __future__ import annotations

import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize as ggufpy_quantize

from kquant_vs_ggml import TYPES, open_vectors, quantize, write_decode_vector
from quant_vectors import random_blocks

# name: (ggml id, bytes per block, values per block), gguf-py type, offset of the fp16 scale.
TQ = {
    "tq1_0": ((34, 54, 256), T.TQ1_0, 52),
    "tq2_0": ((35, 66, 256), T.TQ2_0, 64),
}


def main() -> None:
    lib, lib_path, d, sets = open_vectors(__doc__.split("\n")[0])
    for tname, (geometry, _, _) in TQ.items():
        TYPES[tname] = geometry

    manifest = []
    ggufpy_differs = []
    for name, n_per_row in sets.items():
        data = np.fromfile(d / f"{name}.f32", dtype="<f4")
        for tname, (_, qtype, _) in TQ.items():
            enc = quantize(lib, tname, data, n_per_row)
            (d / f"{name}.{tname}.bin").write_bytes(enc)
            manifest.append(f"encode {name} {tname} {n_per_row}")
            with np.errstate(all="ignore"):
                py = np.ascontiguousarray(ggufpy_quantize(data.reshape(-1, n_per_row), qtype)).tobytes()
            if py != enc:
                ggufpy_differs.append(f"{name}.{tname}")

    failures = 0
    rng = np.random.default_rng(34)
    for tname, ((_, nbytes, _), qtype, d_off) in TQ.items():
        blocks = random_blocks(rng, nbytes, [d_off], 6)
        failures += not write_decode_vector(lib, d, tname, blocks, qtype)
        manifest.append(f"decode {tname}")

    (d / "manifest.tq.txt").write_text(
        f"# written by tests/python/tq_vs_ggml.py from {lib_path.name} (ggml_quantize_chunk, to_float; gguf-py's decoder"
        + (" and encoder agree)\n" if not ggufpy_differs else " agrees)\n")
        + "\n".join(manifest)
        + "\n"
    )
    print(f"wrote {len(manifest)} TQ vectors; {failures} decoder cross-check failures")
    print(f"gguf-py's encoder differs from ggml on: {', '.join(ggufpy_differs) or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
