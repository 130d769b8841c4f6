#!/usr/bin/env python3
"""Independent check of a `tgi quantize --format awq` directory, written from the published AutoAWQ
GEMM format (AutoAWQ `awq/quantize/quantizer.py` pseudo_quantize_tensor, `awq/utils/packing_utils.py`;
formats.md sections 2.1-2.2), with numpy only (the safetensors header is parsed here too).

For every decoder linear of the source checkpoint it
  1. quantizes the source weight itself (round-to-nearest per group of input channels, scale rounded
     to float16 first, zero point derived from the stored scale) and packs codes and zeros in AWQ's
     order [0, 2, 4, 6, 1, 3, 5, 7]: qweight, qzeros and scales must equal the file's byte for byte;
  2. unpacks the file's tensors (reverse order [0, 4, 1, 5, 2, 6, 3, 7]) and dequantizes them,
     W[o, i] = (q[i, o] - z[i // g, o]) * s[i // g, o]: this must equal tgi's own dequantization
     (raw f32 [out, in] files in --ours, written by the Rust test) exactly, and lie within half a
     quantization step of the source (plus the float16 rounding of the scale);
  3. negative control: unpacking with nibbles in plain 0..7 order must be caught by the same check.
Every other tensor must be the source in float16, bit for bit, and config.json must carry the
quantization_config AutoAWQ writes.

usage: awq_unpack.py --source HF_DIR --awq OUT_DIR [--ours DUMP_DIR]
"""

import argparse
import json
import os
import sys

import numpy as np

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
AWQ_REVERSE_ORDER = [0, 4, 1, 5, 2, 6, 3, 7]
DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "BF16": np.uint16}


def read_safetensors(path):
    """name -> numpy array (BF16 widened to float32)."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    n = int(np.frombuffer(raw[:8].tobytes(), dtype="<u8")[0])
    header = json.loads(raw[8 : 8 + n].tobytes())
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        buf = raw[8 + n + start : 8 + n + end].tobytes()
        a = np.frombuffer(buf, dtype=np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")).reshape(info["shape"])
        if info["dtype"] == "BF16":
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a
    return out


def read_checkpoint(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        shards = sorted(set(json.load(open(index))["weight_map"].values()))
        out = {}
        for s in shards:
            out.update(read_safetensors(os.path.join(d, s)))
        return out
    return read_safetensors(os.path.join(d, "model.safetensors"))


def rtn(w, group, zero_point):
    """AutoAWQ's pseudo_quantize_tensor on w [out, in]: codes [out, in], zeros and f16 scales [out, groups]."""
    out_f, in_f = w.shape
    g = w.astype(np.float32).reshape(out_f, in_f // group, group)
    if zero_point:
        lo, hi = g.min(axis=2), g.max(axis=2)
        scale = (np.maximum(hi - lo, np.float32(1e-5)) / np.float32(15)).astype(np.float16)
        zero = np.clip(-np.round(lo / scale.astype(np.float32)), 0, 15).astype(np.uint8)
    else:
        amax = np.abs(g).max(axis=2)
        scale = (np.maximum(amax, np.float32(1e-5)) / np.float32(7)).astype(np.float16)
        zero = np.full(scale.shape, 8, dtype=np.uint8)
    s = scale.astype(np.float32)[:, :, None]
    q = np.clip(np.round(g / s) + zero[:, :, None].astype(np.float32), 0, 15).astype(np.uint8)
    return q.reshape(out_f, in_f), zero, scale


def pack(v, order):
    """[rows, out] 4-bit values -> [rows, out/8] int32, nibble k holding channel 8c + order[k]."""
    rows, cols = v.shape
    v = v.reshape(rows, cols // 8, 8).astype(np.uint32)
    word = np.zeros((rows, cols // 8), dtype=np.uint32)
    for k, j in enumerate(order):
        word |= v[:, :, j] << np.uint32(4 * k)
    return word.view(np.int32)


def unpack(words, order):
    """[rows, out/8] int32 -> [rows, out] values; channel 8c + j from nibble order[j]."""
    w = words.view(np.uint32)
    nibbles = np.stack([(w >> np.uint32(4 * k)) & np.uint32(0xF) for k in range(8)], axis=2)
    return nibbles[:, :, order].reshape(w.shape[0], -1).astype(np.uint8)


def dequantize(qweight, qzeros, scales, group, order):
    """W [out, in] from the GEMM tensors."""
    q = unpack(qweight, order).astype(np.float32)  # [in, out]
    z = np.repeat(unpack(qzeros, order).astype(np.float32), group, axis=0)
    s = np.repeat(scales.astype(np.float32), group, axis=0)
    return ((q - z) * s).T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--awq", required=True)
    ap.add_argument("--ours", help="directory of raw f32 [out, in] files <module>.f32: tgi's dequantization")
    args = ap.parse_args()

    config = json.load(open(os.path.join(args.awq, "config.json")))
    qc = config["quantization_config"]
    expect = {"quant_method": "awq", "bits": 4, "version": "gemm", "modules_to_not_convert": None}
    bad = {k: qc.get(k) for k, v in expect.items() if qc.get(k, "missing") != v}
    assert not bad, f"quantization_config {qc}: wrong {bad}"
    assert config.get("torch_dtype") == "float16" and config.get("dtype") == "float16", config
    group, zp = qc["group_size"], qc["zero_point"]

    src = read_checkpoint(args.source)
    awq = read_safetensors(os.path.join(args.awq, "model.safetensors"))
    linears = sorted(n for n, a in src.items() if n.startswith("model.layers.") and n.endswith("_proj.weight") and a.ndim == 2)
    expected_keys = set(src) - set(linears)
    for n in linears:
        m = n[: -len(".weight")]
        expected_keys |= {m + ".qweight", m + ".qzeros", m + ".scales"}
    assert set(awq) == expected_keys, f"keys differ: extra {sorted(set(awq) - expected_keys)[:5]}, missing {sorted(expected_keys - set(awq))[:5]}"

    worst_steps, worst_control = 0.0, np.inf
    for n in linears:
        m = n[: -len(".weight")]
        w = src[n].astype(np.float32)
        out_f, in_f = w.shape
        qw, qz, sc = awq[m + ".qweight"], awq[m + ".qzeros"], awq[m + ".scales"]
        assert qw.dtype == np.int32 and qw.shape == (in_f, out_f // 8), (m, qw.dtype, qw.shape)
        assert qz.dtype == np.int32 and qz.shape == (in_f // group, out_f // 8), (m, qz.dtype, qz.shape)
        assert sc.dtype == np.float16 and sc.shape == (in_f // group, out_f), (m, sc.dtype, sc.shape)

        # 1. Independent quantizer + packer: byte-identical.
        q, zero, scale = rtn(w, group, zp)
        assert np.array_equal(pack(q.T, AWQ_ORDER), qw), f"{m}: qweight differs from the numpy packer"
        assert np.array_equal(pack(zero.T, AWQ_ORDER), qz), f"{m}: qzeros differ from the numpy packer"
        assert np.array_equal(scale.T.view(np.uint16), sc.view(np.uint16)), f"{m}: scales differ"
        assert not np.array_equal(pack(q.T, list(range(8))), qw), f"{m}: plain-order packing not told apart"

        # 2. Independent unpack + dequantize: equal to tgi's, within half a step of the source.
        deq = dequantize(qw, qz, sc, group, AWQ_REVERSE_ORDER)
        if args.ours:
            ours = np.fromfile(os.path.join(args.ours, m + ".f32"), dtype="<f4").reshape(out_f, in_f)
            assert np.array_equal(deq.view(np.uint32), ours.view(np.uint32)), f"{m}: dequantization differs from tgi's"
        step = np.repeat(sc.astype(np.float32), group, axis=0).T
        steps = float((np.abs(deq - w) / step).max())
        # Half a step, plus what rounding the scale to float16 moves the 15-step range by.
        assert steps <= 0.5 + 15 * 2.0**-11, f"{m}: error {steps:.4f} steps from the source"
        worst_steps = max(worst_steps, steps)

        # 3. Negative control: plain nibble order.
        wrong = dequantize(qw, qz, sc, group, list(range(8)))
        worst_control = min(worst_control, float((np.abs(wrong - w) / step).max()))

    assert worst_control > 2.0, f"negative control not detected: plain-order unpack within {worst_control} steps"

    for n in expected_keys & set(src):
        a = awq[n]
        assert a.dtype == np.float16 and a.shape == src[n].shape, (n, a.dtype, a.shape)
        assert np.array_equal(src[n].astype(np.float32).astype(np.float16).view(np.uint16), a.view(np.uint16)), n

    print(
        f"awq_unpack: {len(linears)} linears byte-identical to the numpy quantizer+packer (group {group}, "
        f"zero_point {zp}); dequantization {'equal to tgi' + chr(39) + 's' if args.ours else 'not compared'}; "
        f"worst error {worst_steps:.4f} steps; negative control (plain nibble order) off by >= {worst_control:.1f} steps; "
        f"{len(expected_keys & set(src))} other tensors float16-exact"
    )


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"awq_unpack: FAILED: {e}", file=sys.stderr)
        sys.exit(1)
