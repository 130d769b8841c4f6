#!/usr/bin/env python3
"""Writes the K-quant test vectors from llama.cpp's own ggml (`libggml-base.so`, via ctypes).

For every input `<set>.f32` listed in `manifest.ggufpy.txt` (run `quant_vectors.py` first) this
calls `ggml_quantize_chunk(type, src, dst, start=0, nrows, n_per_row, imatrix=NULL)` -- what
`llama-quantize` does without `--imatrix` -- and writes `<set>.<type>.bin` for Q2_K, Q3_K, Q4_K,
Q5_K and Q6_K, listed in `manifest.ggml.txt` (same format as `manifest.ggufpy.txt`).

It also cross-checks, and fails on any difference:
  * ggml's bytes for F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 against the gguf-py files;
  * ggml's decoders (`ggml_get_type_traits(t)->to_float`) on every `decode.<type>.bin` against
    gguf-py's `decode.<type>.f32` (the i-quants included).

Usage: python3 tests/python/kquant_vs_ggml.py [--lib PATH/libggml-base.so] [--dir DIR]
The library is looked up in --lib, $GGML_BASE_LIB, then under /work/llama.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from pathlib import Path

import numpy as np
from gguf.quants import dequantize as ggufpy_dequantize

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "formats/tests/data/quant_vectors"

# ggml type ids (include/ggml.h) and bytes per block / values per block.
TYPES = {
    "f16": (1, 2, 1),
    "bf16": (30, 2, 1),
    "q4_0": (2, 18, 32),
    "q4_1": (3, 20, 32),
    "q5_0": (6, 22, 32),
    "q5_1": (7, 24, 32),
    "q8_0": (8, 34, 32),
    "q2_K": (10, 84, 256),
    "q3_K": (11, 110, 256),
    "q4_K": (12, 144, 256),
    "q5_K": (13, 176, 256),
    "q6_K": (14, 210, 256),
}
# Decode-only types (the i-quants: their ggml encoders need an importance matrix).
DECODE_TYPES = {
    "iq2_xxs": (16, 66, 256),
    "iq2_xs": (17, 74, 256),
    "iq3_xxs": (18, 98, 256),
    "iq1_s": (19, 50, 256),
    "iq3_s": (21, 110, 256),
    "iq2_s": (22, 82, 256),
    "iq1_m": (29, 56, 256),
}
K_TYPES = ["q2_K", "q3_K", "q4_K", "q5_K", "q6_K"]

TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64)


class TypeTraits(ctypes.Structure):
    """`struct ggml_type_traits` (include/ggml.h)."""

    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", TO_FLOAT),
        ("from_float_ref", ctypes.c_void_p),
    ]


def find_lib(arg: str | None) -> Path:
    for cand in (arg, os.environ.get("GGML_BASE_LIB")):
        if cand:
            return Path(cand)
    hits = sorted(Path("/work/llama").rglob("libggml-base.so*")) if Path("/work/llama").exists() else []
    if not hits:
        sys.exit("libggml-base.so not found: pass --lib or set GGML_BASE_LIB")
    return hits[0]


def load(lib_path: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(lib_path))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_float),
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    lib.ggml_get_type_traits.restype = ctypes.POINTER(TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    return lib


def quantize(lib: ctypes.CDLL, tname: str, data: np.ndarray, n_per_row: int) -> bytes:
    tid, bsize, bvals = TYPES[tname]
    nrows = data.size // n_per_row
    dst = np.zeros(data.size // bvals * bsize, dtype=np.uint8)
    src = np.ascontiguousarray(data, dtype=np.float32)
    n = lib.ggml_quantize_chunk(
        tid, src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), dst.ctypes.data, 0, nrows, n_per_row, None
    )
    assert n == dst.size, (tname, n, dst.size)
    return dst.tobytes()


def dequantize(lib: ctypes.CDLL, tname: str, blocks: bytes) -> np.ndarray:
    tid, bsize, bvals = {**TYPES, **DECODE_TYPES}[tname]
    n = len(blocks) // bsize * bvals
    out = np.zeros(n, dtype=np.float32)
    src = np.frombuffer(blocks, dtype=np.uint8).copy()
    lib.ggml_get_type_traits(tid).contents.to_float(
        src.ctypes.data, out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), n
    )
    return out


def write_decode_vector(lib: ctypes.CDLL, d: Path, tname: str, blocks: np.ndarray, qtype) -> bool:
    """Decodes `blocks` of `tname` with ggml's `to_float` into `decode.<tname>.bin` / `.f32` (and the line
    `decode <tname>` of a manifest); whether gguf-py's `dequantize` of them (type `qtype`) gives the same bits."""
    got = dequantize(lib, tname, blocks.tobytes())
    want = ggufpy_dequantize(blocks.reshape(1, -1), qtype).astype("<f4").reshape(-1)
    (d / f"decode.{tname}.bin").write_bytes(blocks.tobytes())
    (d / f"decode.{tname}.f32").write_bytes(got.astype("<f4").tobytes())
    if got.tobytes() != want.tobytes():
        print(f"MISMATCH ggml vs gguf-py decoder: {tname}")
        return False
    return True


def open_vectors(description: str) -> tuple[ctypes.CDLL, Path, Path, dict[str, int]]:
    """The vector scripts' command line (--lib, --dir): the loaded libggml-base, its path, the vector directory and
    its encode sets (name: values per row, from manifest.ggufpy.txt)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--lib")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = ap.parse_args()
    lib_path = find_lib(args.lib)
    lines = [l.split() for l in (args.dir / "manifest.ggufpy.txt").read_text().splitlines()]
    return load(lib_path), lib_path, args.dir, {p[1]: int(p[3]) for p in lines if p and p[0] == "encode"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib")
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = ap.parse_args()
    lib_path = find_lib(args.lib)
    lib = load(lib_path)
    d: Path = args.dir

    sets: dict[str, int] = {}
    decode_types: list[str] = []
    for line in (d / "manifest.ggufpy.txt").read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "encode":
            sets[parts[1]] = int(parts[3])
        elif parts and parts[0] == "decode":
            decode_types.append(parts[1])

    failures = 0
    manifest = []
    for name, n_per_row in sets.items():
        data = np.fromfile(d / f"{name}.f32", dtype="<f4")
        for tname in TYPES:
            got = quantize(lib, tname, data, n_per_row)
            path = d / f"{name}.{tname}.bin"
            if tname in K_TYPES:
                path.write_bytes(got)
                manifest.append(f"encode {name} {tname} {n_per_row}")
            elif got != path.read_bytes():
                print(f"MISMATCH ggml vs gguf-py: {name} {tname}")
                failures += 1
    for tname in decode_types:
        blocks = (d / f"decode.{tname}.bin").read_bytes()
        want = np.fromfile(d / f"decode.{tname}.f32", dtype="<f4")
        got = dequantize(lib, tname, blocks)
        if got.tobytes() != want.tobytes():
            print(f"MISMATCH ggml vs gguf-py decoder: {tname}")
            failures += 1

    (d / "manifest.ggml.txt").write_text(
        f"# written by tests/python/kquant_vs_ggml.py from {lib_path} (ggml_quantize_chunk, no imatrix)\n"
        + "\n".join(manifest)
        + "\n"
    )
    print(f"wrote {len(manifest)} K-quant vectors; {failures} cross-check failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
