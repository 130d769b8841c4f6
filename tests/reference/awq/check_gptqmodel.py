#!/usr/bin/env python3
"""Third-party load of a `tgi quantize --format awq` directory: transformers + gptqmodel on CPU.

Records in a JSON file (gptqmodel_load.json beside this script by default):
  - the versions, the SHA-256 of the model.safetensors loaded (tests/quantize_awq.rs checks that
    `tgi quantize` still writes exactly that file), the quantization_config and the gptqmodel
    kernel classes chosen;
  - per quantized module, max |awq_weight_dequantize() - numpy unpack| (gptqmodel's copy of AutoAWQ's
    dequantize_gemm on the loaded buffers vs tests/python/awq_unpack.py's independent unpacker, as
    float16 like the kernel's weights);
  - logits for a fixed prompt from (a) transformers + gptqmodel on our directory (float16), (b) the
    dense float32 model whose linears are the numpy-dequantized weights and whose other tensors are
    our float16 values, (c) the float32 source model; and the max/mean |a - b|, |a - c|, |b - c|.
    (a) vs (b) is the loader tolerance: same weights, float16 vs float32 arithmetic.

usage (torch venv; the two committed JSON files):
  tgi quantize models/stories-distill-4l/hf --format awq --method rtn -o /tmp/awq-ref
  python tests/reference/awq/check_gptqmodel.py --source models/stories-distill-4l/hf --awq /tmp/awq-ref
  tgi quantize models/stories-distill-4l/hf --format awq --no-zero-point --group-size 32 -o /tmp/awq-sym
  python tests/reference/awq/check_gptqmodel.py --source models/stories-distill-4l/hf --awq /tmp/awq-sym \
      --out tests/reference/awq/gptqmodel_load_sym_g32.json \
      --command "tgi quantize models/stories-distill-4l/hf --format awq --no-zero-point --group-size 32 -o DIR"
"""

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "Once upon a time, there was a little girl named Lily. She loved to"


def load_unpacker():
    path = os.path.join(HERE, "..", "..", "python", "awq_unpack.py")
    spec = importlib.util.spec_from_file_location("awq_unpack", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def diff(a, b):
    d = np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64))
    return {"max": float(d.max()), "mean": float(d.mean())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--awq", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "gptqmodel_load.json"))
    ap.add_argument("--command", default="tgi quantize models/stories-distill-4l/hf --format awq --method rtn -o DIR",
                    help="the tgi command that wrote --awq, recorded in the JSON")
    args = ap.parse_args()

    import gptqmodel
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    unpack = load_unpacker()
    qc = json.load(open(os.path.join(args.awq, "config.json")))["quantization_config"]
    group = qc["group_size"]
    tok = AutoTokenizer.from_pretrained(args.awq)
    ids = tok(PROMPT, return_tensors="pt").input_ids

    t0 = time.time()
    model = AutoModelForCausalLM.from_pretrained(args.awq, device_map="cpu", dtype=torch.float16)
    load_s = time.time() - t0
    model.eval()
    awq = unpack.read_safetensors(os.path.join(args.awq, "model.safetensors"))
    kernels, dequant = set(), {}
    for name, m in model.named_modules():
        if hasattr(m, "qweight") and hasattr(m, "awq_weight_dequantize"):
            kernels.add(type(m).__name__)
            # AutoAWQ's dequantize_gemm on the loaded buffers (before the first forward repacks them).
            theirs = m.awq_weight_dequantize("cpu", torch.float32).detach().numpy()  # [in, out]
            ours = unpack.dequantize(
                awq[name + ".qweight"], awq[name + ".qzeros"], awq[name + ".scales"], group, unpack.AWQ_REVERSE_ORDER
            )  # [out, in], f32
            dequant[name] = float(np.abs(theirs - ours.T.astype(np.float16).astype(np.float32)).max())
    assert dequant, "no AWQ module found in the loaded model"
    with torch.no_grad():
        t0 = time.time()
        awq_logits = model(ids).logits[0].to(torch.float32).numpy()
        forward_s = time.time() - t0

    # Dense float32 models: the source, and the source with our (dequantized / float16) tensors.
    src = unpack.read_checkpoint(args.source)
    dense = AutoModelForCausalLM.from_pretrained(args.source, device_map="cpu", dtype=torch.float32)
    dense.eval()
    with torch.no_grad():
        f32_logits = dense(ids).logits[0].numpy()
        state = {}
        for name in src:
            if name.endswith("_proj.weight") and name.startswith("model.layers."):
                m = name[: -len(".weight")]
                w = unpack.dequantize(awq[m + ".qweight"], awq[m + ".qzeros"], awq[m + ".scales"], group, unpack.AWQ_REVERSE_ORDER)
            else:
                w = awq[name].astype(np.float32)
            state[name] = torch.from_numpy(np.ascontiguousarray(w))
        missing, unexpected = dense.load_state_dict(state, strict=False)
        assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
        deq_logits = dense(ids).logits[0].numpy()

    result = {
        "script": "tests/reference/awq/check_gptqmodel.py",
        "source": os.path.relpath(os.path.abspath(args.source), os.path.join(HERE, "..", "..", "..")),
        "command": args.command,
        "model_safetensors_sha256": sha256(os.path.join(args.awq, "model.safetensors")),
        "quantization_config": qc,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "gptqmodel": gptqmodel.__version__,
            "numpy": np.__version__,
        },
        "cpu": platform.processor() or platform.machine(),
        "kernels": sorted(kernels),
        "load_seconds": round(load_s, 1),
        "forward_seconds": round(forward_s, 2),
        "awq_weight_dequantize_vs_numpy_unpack_max_abs": dequant,
        "prompt": PROMPT,
        "prompt_ids": ids[0].tolist(),
        "logits_gptqmodel_f16": [[round(float(x), 5) for x in row] for row in awq_logits],
        "gptqmodel_vs_dense_dequantized_f32": diff(awq_logits, deq_logits),
        "gptqmodel_vs_source_f32": diff(awq_logits, f32_logits),
        "dense_dequantized_vs_source_f32": diff(deq_logits, f32_logits),
        "argmax_agreement_gptqmodel_vs_dense_dequantized": float((awq_logits.argmax(-1) == deq_logits.argmax(-1)).mean()),
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    short = {k: v for k, v in result.items() if not k.startswith("logits") and k != "awq_weight_dequantize_vs_numpy_unpack_max_abs"}
    short["awq_weight_dequantize_max_abs_over_modules"] = max(dequant.values())
    print(json.dumps(short, indent=1))


if __name__ == "__main__":
    sys.exit(main())
