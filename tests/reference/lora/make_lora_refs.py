#!/usr/bin/env python3
"""Make small PEFT LoRA adapters with random weights on the bundled models and record transformers+peft's logits
and the merged models' greedy tokens, for tgi's LoRA tests.

This is how tests/reference/lora/ was made:

    python3 tests/reference/lora/make_lora_refs.py [--models-dir models]

Each adapter in ADAPTERS is `get_peft_model(base, LoraConfig(...))` with every lora_A and lora_B drawn from a
seeded normal distribution (PEFT initializes B to zero, which would make the adapter a no-op), saved with
`save_pretrained` into `tests/reference/lora/<name>/` (adapter_config.json + adapter_model.safetensors).
`lora_refs.json` holds, per adapter and prompt: `prompt_ids`, `last_logits` (the peft model's float32 logits at
the last prompt position) and `greedy_ids` (24 tokens by argmax over full forward passes of the model merged with
`merge_and_unload()`, no KV cache, no stop at EOS), and `base_greedy_ids` (the same loop on the base, to show
the adapter changes the text).

Needs: torch, transformers, peft, safetensors, numpy. Runs on CPU in well under a minute.
"""

import argparse
import datetime
import json
import platform
from pathlib import Path

import numpy as np
import peft
import torch
import transformers
from peft import LoraConfig, get_peft_model
from transformers import AutoTokenizer, LlamaForCausalLM

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# name: (base model, rank, alpha, rslora, target modules, seed, weight std)
ADAPTERS = {
    "s260k-qv-r4": ("stories260k", 4, 8, False, ["q_proj", "v_proj"], 1, 0.3),
    "s260k-all-r8-rs": ("stories260k", 8, 16, True, ALL, 2, 0.05),
    "s260k-mlp-r2": ("stories260k", 2, 2, False, ["o_proj", "gate_proj", "up_proj", "down_proj"], 3, 0.4),
    "s260k-kd-r16": ("stories260k", 16, 8, False, ["k_proj", "down_proj"], 4, 0.2),
    "d4l-all-r16": ("stories-distill-4l", 16, 32, False, ALL, 5, 0.05),
}
PROMPTS = ["Once upon a time", "Lily and Ben were playing in the", "The cat"]
N_GREEDY = 24


def floats(t):
    return [float(x) for x in t.detach().to(torch.float32).numpy()]


@torch.no_grad()
def greedy(model, ids):
    seq = list(ids)
    for _ in range(N_GREEDY):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids):]


def tidy(adapter_dir, base_name):
    """Drops the generated model card and records the base as the repository-relative path."""
    (adapter_dir / "README.md").unlink(missing_ok=True)
    cfg_path = adapter_dir / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = f"models/{base_name}/hf"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def load(models_dir, name):
    return LlamaForCausalLM.from_pretrained(models_dir / name / "hf", dtype=torch.float32, attn_implementation="eager")


def main():
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=here.parent.parent.parent / "models")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    out = {
        "generator": "tests/reference/lora/make_lora_refs.py",
        "date": datetime.date.today().isoformat(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "n_greedy": N_GREEDY,
        "adapters": {},
    }
    for name, (base_name, r, alpha, rslora, targets, seed, std) in ADAPTERS.items():
        tok = AutoTokenizer.from_pretrained(args.models_dir / base_name / "hf")
        base = load(args.models_dir, base_name)
        cfg = LoraConfig(r=r, lora_alpha=alpha, use_rslora=rslora, target_modules=targets, lora_dropout=0.0,
                         bias="none", task_type="CAUSAL_LM")
        model = get_peft_model(base, cfg)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if "lora_A" in pname or "lora_B" in pname:
                    p.copy_(torch.randn(p.shape, generator=g) * std)
        model.eval()
        model.save_pretrained(here / name)
        tidy(here / name, base_name)
        prompts = []
        with torch.no_grad():
            for text in PROMPTS:
                ids = tok(text).input_ids
                last = model(torch.tensor([ids]), use_cache=False).logits[0, -1]
                prompts.append({"prompt": text, "prompt_ids": ids, "last_logits": floats(last)})
        merged = model.merge_and_unload()
        base = load(args.models_dir, base_name)
        for p in prompts:
            p["greedy_ids"] = greedy(merged, p["prompt_ids"])
            p["base_greedy_ids"] = greedy(base, p["prompt_ids"])
        out["adapters"][name] = {"base": base_name, "rank": r, "alpha": alpha, "rslora": rslora,
                                 "targets": targets, "prompts": prompts}
        changed = sum(p["greedy_ids"] != p["base_greedy_ids"] for p in prompts)
        print(f"{name}: {changed}/{len(prompts)} greedy texts differ from the base")
    (here / "lora_refs.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
