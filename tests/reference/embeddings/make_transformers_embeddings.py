#!/usr/bin/env python3
"""Record Hugging Face transformers' pooled final hidden states of the fixture models, for the checks of
`tgi serve`'s /v1/embeddings and /embed (tests/embeddings.rs).

This is how tests/reference/embeddings/transformers_embeddings.json was made:

    python3 tests/reference/embeddings/make_transformers_embeddings.py [--models-dir models]

For stories260k and stories-distill-4l (their `hf/` directories, loaded with
`LlamaModel.from_pretrained(dir, torch_dtype=torch.float32, attn_implementation="eager")`: the decoder without
its LM head) and a few inputs: `ids` (the tokenizer's ids, with the BOS it adds), and from `last_hidden_state`
(the decoder's final hidden state, after the final RMSNorm) `mean` (the mean over every position) and `last`
(the last position's), not normalized, float32 values written as Python floats (exact).

Needs: torch, transformers, safetensors (not in tests/python/requirements.txt: torch is heavy). Runs on CPU in
seconds.
"""

import argparse
import datetime
import json
import platform
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, LlamaModel

MODELS = ["stories260k", "stories-distill-4l"]
INPUTS = [
    "Once upon a time",
    "Lily and Ben were playing in the park. They saw a big red ball.",
    "The cat",
    "Sue liked to eat apples.\nOne day",
]


def floats(t):
    return [float(x) for x in t.detach().to(torch.float32).numpy()]


def main():
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=here.parent.parent.parent / "models")
    ap.add_argument("--out", type=Path, default=here / "transformers_embeddings.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    out = {
        "generator": "tests/reference/embeddings/make_transformers_embeddings.py",
        "date": datetime.date.today().isoformat(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "python": platform.python_version()},
        "load": 'LlamaModel.from_pretrained(dir, torch_dtype=torch.float32, attn_implementation="eager"), CPU',
        "tokenizer": "AutoTokenizer.from_pretrained(dir)(input).input_ids (adds BOS)",
        "pooling": "mean: last_hidden_state[0].mean(0); last: last_hidden_state[0, -1]; neither normalized",
        "models": {},
    }
    for name in MODELS:
        d = args.models_dir / name / "hf"
        tok = AutoTokenizer.from_pretrained(d)
        model = LlamaModel.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
        model.eval()
        entry = {"dir": f"models/{name}/hf", "hidden_size": model.config.hidden_size, "inputs": []}
        for text in INPUTS:
            ids = tok(text).input_ids
            with torch.no_grad():
                h = model(torch.tensor([ids])).last_hidden_state[0]
            entry["inputs"].append({"input": text, "ids": ids, "mean": floats(h.mean(0)), "last": floats(h[-1])})
            print(f"{name} {text!r}: {len(ids)} tokens", flush=True)
        out["models"][name] = entry
    args.out.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
