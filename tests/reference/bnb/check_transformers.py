#!/usr/bin/env python3
"""transformers + bitsandbytes (CPU) against tgi's NF4/FP4 checkpoints of the bundled stories260k model.

Two steps (run from the repository root with a venv holding torch, transformers 5.24, bitsandbytes 0.50.2,
accelerate; here /work/refs-tmp/venv):

  python tests/reference/bnb/check_transformers.py save-fixture
      Quantizes models/stories260k/hf with transformers itself
      (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True),
      device_map="cpu") and save_pretrained()s it, with the tokenizer, to
      models/stories260k-nf4-transformers/ (the fixture tgi's tests compare its own output with).

  python tests/reference/bnb/check_transformers.py check
      Runs `tgi quantize models/stories260k/hf --format nf4|fp4` (target/release/tgi, or $TGI), loads each
      output with AutoModelForCausalLM.from_pretrained(dir, device_map="cpu") (no quantization_config
      argument: the one in config.json is used), and records into transformers_nf4.json: load warnings
      (missing/unexpected keys), the logits of a fixed prompt for tgi's NF4 and FP4 checkpoints, for the
      transformers-saved fixture, and for the float32 model, plus max |Δ| between them.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import transformers
import bitsandbytes
from transformers import AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig

ROOT = Path(__file__).resolve().parents[3]
HF = ROOT / "models/stories260k/hf"
FIXTURE = ROOT / "models/stories260k-nf4-transformers"
OUT_JSON = Path(__file__).resolve().parent / "transformers_nf4.json"
PROMPT = "Once upon a time, there was a little girl named Lily."


def save_fixture():
    cfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True)
    model = AutoModelForCausalLM.from_pretrained(HF, quantization_config=cfg, device_map="cpu")
    print(model.model.layers[0].self_attn.q_proj, file=sys.stderr)
    model.save_pretrained(FIXTURE)
    AutoTokenizer.from_pretrained(HF).save_pretrained(FIXTURE)
    print(f"saved {FIXTURE}", file=sys.stderr)


def logits_of(model_dir, ids):
    # output_loading_info lists missing/unexpected keys; both must be empty for a clean load.
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, device_map="cpu", output_loading_info=True)
    model.eval()
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    kinds = sorted({type(m).__name__ for m in model.modules() if "Linear" in type(m).__name__})
    return logits, {k: sorted(v) if isinstance(v, (list, set)) else str(v) for k, v in info.items()}, kinds


def check():
    tgi = os.environ.get("TGI", str(ROOT / "target/release/tgi"))
    tok = AutoTokenizer.from_pretrained(HF)
    ids = tok(PROMPT, return_tensors="pt").input_ids
    report = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                           "bitsandbytes": bitsandbytes.__version__},
              "prompt": PROMPT, "prompt_ids": ids[0].tolist(), "models": {}}
    ref, _, _ = logits_of(HF, ids)
    results = {"f32": ref}
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("nf4", "fp4"):
            out = Path(tmp) / fmt
            subprocess.run([tgi, "quantize", str(HF), "--format", fmt, "-o", str(out), "--quiet"], check=True)
            logits, info, kinds = logits_of(out, ids)
            results[f"tgi-{fmt}"] = logits
            report["models"][f"tgi-{fmt}"] = {"loading_info": info, "linear_classes": kinds}
    logits, info, kinds = logits_of(FIXTURE, ids)
    results["transformers-nf4"] = logits
    report["models"]["transformers-nf4"] = {"loading_info": info, "linear_classes": kinds}
    for name, l in results.items():
        entry = report["models"].setdefault(name, {})
        entry["last_logits"] = [float(v) for v in l[-1].tolist()]
        entry["argmax"] = l.argmax(-1).tolist()
        entry["max_abs_diff_vs_f32"] = float((l - ref).abs().max())
    report["max_abs_diff_tgi_nf4_vs_transformers_nf4"] = float((results["tgi-nf4"] - results["transformers-nf4"]).abs().max())
    OUT_JSON.write_text(json.dumps(report, indent=1) + "\n")
    for name, m in report["models"].items():
        print(f"{name:18} max|Δ| vs f32 {m['max_abs_diff_vs_f32']:.5f}  load info {m.get('loading_info')}",
              file=sys.stderr)
    print(f"tgi nf4 vs transformers nf4: {report['max_abs_diff_tgi_nf4_vs_transformers_nf4']}", file=sys.stderr)


if __name__ == "__main__":
    {"save-fixture": save_fixture, "check": check}[sys.argv[1] if len(sys.argv) > 1 else "check"]()
