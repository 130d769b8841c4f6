#!/usr/bin/env python3
"""Independent check of a GGUF file written by `tgi quantize`, using the `gguf` package
(llama.cpp's own gguf-py), not tgi's reader.

    check_gguf.py --f32 MODEL-F32.gguf --quant MODEL-Q.gguf [--summary SUMMARY.json]

Checks: the container (version, metadata value types llama.cpp requires, gap-free 32-byte
aligned offsets), every tensor's shape against the F32 file, byte equality with gguf-py's
quantizers for the types it implements (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, BF16, F16), and for the
k-quants that gguf-py's decoder recovers the F32 values with the error tgi reported.
Exit status 0 when everything holds; each failure is printed.
"""
import argparse
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType
from gguf.quants import dequantize, quantize

QUANTIZERS = {T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.BF16}
# Upper bounds on relative RMSE for Gaussian-like weights (a broken codec lands far above).
KQUANT_BOUND = {T.Q2_K: 0.40, T.Q3_K: 0.22, T.Q4_K: 0.12, T.Q5_K: 0.06, T.Q6_K: 0.03}
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg)


def check_container(r, path):
    arch = r.fields["general.architecture"].contents()
    for name, field in r.fields.items():
        if not name.startswith(arch + "."):
            continue
        t = field.types[0]
        if t in (GGUFValueType.UINT64, GGUFValueType.INT64, GGUFValueType.INT32):
            fail(f"{path}: {name} is {t.name}; llama.cpp requires UINT32")
        if t == GGUFValueType.FLOAT64:
            fail(f"{path}: {name} is FLOAT64; llama.cpp requires FLOAT32")
    if "general.quantization_version" in r.fields and r.fields["general.quantization_version"].contents() != 2:
        fail(f"{path}: general.quantization_version != 2")
    expected = 0
    for t in r.tensors:
        rel = t.data_offset - r.tensors[0].data_offset
        if rel != expected:
            fail(f"{path}: tensor {t.name} at relative offset {rel}, expected {expected} (gap-free)")
        if t.data_offset % 32:
            fail(f"{path}: tensor {t.name} offset {t.data_offset} not 32-byte aligned")
        expected = rel + (t.n_bytes + 31) // 32 * 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--f32", required=True)
    ap.add_argument("--quant", required=True)
    ap.add_argument("--summary")
    a = ap.parse_args()
    ref = GGUFReader(a.f32)
    q = GGUFReader(a.quant)
    check_container(q, a.quant)
    reported = {}
    if a.summary:
        reported = {t["name"]: t for t in json.load(open(a.summary))["per_tensor"]}
    src = {t.name: t for t in ref.tensors}
    checked = 0
    for t in q.tensors:
        s = src.get(t.name)
        if s is None:
            fail(f"{t.name}: not in the F32 file")
            continue
        if list(s.shape) != list(t.shape):
            fail(f"{t.name}: shape {list(t.shape)} != {list(s.shape)}")
            continue
        x = np.asarray(s.data, dtype=np.float32).reshape(-1, int(s.shape[0]))
        ty = t.tensor_type
        ours = np.asarray(t.data).tobytes()
        if ty in QUANTIZERS:
            want = quantize(x, ty).tobytes()
            if ours != want:
                fail(f"{t.name}: {ty.name} bytes differ from gguf-py's quantizer")
        elif ty == T.F16:
            if ours != x.astype(np.float16).tobytes():
                fail(f"{t.name}: F16 bytes differ from numpy's conversion")
        elif ty == T.F32:
            if ours != x.tobytes():
                fail(f"{t.name}: F32 bytes differ")
        else:
            dec = dequantize(np.asarray(t.data), ty).reshape(x.shape)
            err = float(np.sqrt(np.sum((dec.astype(np.float64) - x) ** 2) / max(np.sum(x.astype(np.float64) ** 2), 1e-30)))
            if err > KQUANT_BOUND.get(ty, 0.0):
                fail(f"{t.name}: {ty.name} relative RMSE {err:.4f} after gguf-py decoding")
            r = reported.get(t.name)
            if r is not None and abs(r["relative_rmse"] - err) > 1e-4 * max(1.0, err):
                fail(f"{t.name}: tgi reported relative RMSE {r['relative_rmse']:.6f}, gguf-py decodes {err:.6f}")
        checked += 1
    print(f"{a.quant}: {checked} tensors checked, {len(failures)} failures")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
