#!/usr/bin/env python3
"""Writes the IQ2_XXS / IQ2_XS / IQ2_S / IQ1_S / IQ1_M encoder vectors from llama.cpp's own ggml
(`libggml-base.so`, via ctypes).

For every input `<set>.f32` listed in `manifest.ggufpy.txt` (run `quant_vectors.py` and
`imatrix_vs_ggml.py` first) this calls `ggml_quantize_chunk(type, src, dst, 0, nrows, n_per_row, imatrix)`
with `<set>.imatrix.f32` for each type (`<set>.<type>.imatrix.bin`) and, for IQ2_S and IQ1_M, once without
(`<set>.<type>.bin`; ggml asserts an importance matrix for IQ2_XXS, IQ2_XS and IQ1_S, IQ1_M weighs by x²
without one). Their decoder vectors come from `iq_grids.py`'s reference blocks. Everything is listed in
`manifest.iq2.txt`.

Usage: python3 tests/python/iq2_vs_ggml.py [--lib PATH/libggml-base.so] [--dir DIR]
"""

from __future__ import annotations

from iq3_vs_ggml import write_vectors

# (type, whether ggml encodes it without an importance matrix)
IQ2 = [("iq2_xxs", False), ("iq2_xs", False), ("iq2_s", True), ("iq1_s", False), ("iq1_m", True)]

if __name__ == "__main__":
    write_vectors("iq2", IQ2, "IQ2/IQ1")
