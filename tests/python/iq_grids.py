#!/usr/bin/env python3
"""Writes `formats/src/quant/iq/grids.rs`: the i-quant codebooks (ggml's iq2xxs_grid, iq2xs_grid,
iq2s_grid, iq3xxs_grid, iq3s_grid, iq1s_grid) as gguf-py stores them, packed hex text plus the
level each packed code maps to; `grids.rs` unpacks them at compile time.

Usage: python3 tests/python/iq_grids.py   (requires: pip install gguf)
"""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from gguf import quants

OUT = Path(__file__).resolve().parents[2] / "formats/src/quant/iq/grids.rs"

# (Rust name, gguf-py class, ggml table name); every level fits an i8.
GRIDS = [
    ("IQ2XXS", quants.IQ2_XXS, "iq2xxs_grid"),
    ("IQ2XS", quants.IQ2_XS, "iq2xs_grid"),
    ("IQ2S", quants.IQ2_S, "iq2s_grid"),
    ("IQ3XXS", quants.IQ3_XXS, "iq3xxs_grid"),
    ("IQ3S", quants.IQ3_S, "iq3s_grid"),
    ("IQ1S", quants.IQ1_S, "iq1s_grid"),
]

HEADER = """\
//! The i-quant codebooks of ggml-common.h, written by `tests/python/iq_grids.py` from gguf-py
//! {version}'s packed tables (do not edit by hand).

use super::unpack::unpack_grid;
"""


def main() -> None:
    out = [HEADER.format(version=version("gguf"))]
    for rust, cls, cname in GRIDS:
        rows, width = cls.grid_shape
        levels = ", ".join(str(int(v)) for v in cls.grid_map)
        hexs = cls.grid_hex.decode()
        lines = [hexs[i : i + 96] for i in range(0, len(hexs), 96)]
        body = "\\\n    ".join(lines)
        out.append(
            f"\n/// ggml's `{cname}`: {rows} codewords of {width} levels.\n"
            f"pub(crate) static {rust}: [[i8; {width}]; {rows}] = unpack_grid(\n"
            f'    b"{body}",\n    &[{levels}],\n);\n'
        )
    OUT.write_text("".join(out))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
