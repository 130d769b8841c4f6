#!/usr/bin/env python3
"""Record Hugging Face transformers' float32 logits and greedy tokens for the fixture models, for tgi's
inference engine tests.

This is how tests/reference/transformers_logits.json was made (see README.md there):

    python3 tests/reference/make_transformers_refs.py [--models-dir models] [--llamacpp tests/reference/llamacpp_logits.json]

For stories260k and stories-distill-4l (their `hf/` directories, loaded with
`LlamaForCausalLM.from_pretrained(dir, torch_dtype=torch.float32, attn_implementation="eager")`) and five prompts:
`prompt_ids` (the tokenizer's ids, with the BOS it adds), `greedy_ids` (48 new tokens from a manual argmax loop
over full forward passes without a KV cache, no stop at EOS), `last_logits` (logits at the last prompt position)
and `logits_after_16` (logits at the last position of prompt + the first 16 greedy tokens), full vocabulary,
float32 values written as Python floats (exact).

If llamacpp_logits.json (from make_llamacpp_logits.py) exists, a `crosscheck` against llama.cpp's stories260k F32
(and Q8_0) results is added.

Needs: torch, transformers, safetensors, numpy. Runs on CPU in well under a minute.
"""

import argparse
import datetime
import hashlib
import json
import platform
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer, LlamaForCausalLM

MODELS = ["stories260k", "stories-distill-4l"]
PROMPTS = [
    "Once upon a time",
    "Lily and Ben were playing in the",
    "The cat",
    " Tom had a big red ball. He",
    "Sue liked to eat apples.\nOne day",
]
N_GREEDY = 48
AFTER = 16


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def floats(t):
    return [float(x) for x in t.detach().to(torch.float32).numpy()]


@torch.no_grad()
def run(model, ids):
    """Greedy decoding by argmax (first maximum) over full forward passes; no KV cache, no stop at EOS."""
    seq = list(ids)
    last = after = None
    for i in range(N_GREEDY):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        if i == 0:
            last = logits
        if i == AFTER:
            after = logits
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids):], last, after


def crosscheck(tf, lc_path):
    lc = json.loads(Path(lc_path).read_text())
    st_tf = tf["models"]["stories260k"]["prompts"]
    res = {"against": f"tests/reference/{Path(lc_path).name} (generated {lc.get('date')})", "stories260k": {}}
    for key in ["f32", "f32_kv_f32", "q8_0"]:
        f = lc["models"]["stories260k"]["files"].get(key)
        if not f:
            continue
        per = []
        for a, b in zip(st_tf, f["prompts"]):
            assert a["prompt"] == b["prompt"]
            g_tf, g_lc = a["greedy_ids"], b["greedy_ids"]
            first_diff = next((i for i, (x, y) in enumerate(zip(g_tf, g_lc)) if x != y), None)
            d_last = float(np.max(np.abs(np.array(a["last_logits"]) - np.array(b["last_logits"]))))
            d_after = float(np.max(np.abs(np.array(a["logits_after_16"]) - np.array(b["logits_after_16"]))))
            per.append({"prompt": a["prompt"], "prompt_ids_equal": a["prompt_ids"] == b["prompt_ids"],
                        "greedy_ids_equal": g_tf == g_lc, "first_greedy_difference": first_diff,
                        "max_abs_diff_last_logits": d_last, "max_abs_diff_logits_after_16": d_after})
        res["stories260k"][key] = {
            "llamacpp_file": f["file"],
            "all_prompt_ids_equal": all(p["prompt_ids_equal"] for p in per),
            "all_greedy_ids_equal": all(p["greedy_ids_equal"] for p in per),
            "max_abs_diff_last_logits": max(p["max_abs_diff_last_logits"] for p in per),
            "max_abs_diff_logits_after_16": max(p["max_abs_diff_logits_after_16"] for p in per),
            "prompts": per,
        }
    return res


def dump(obj, path):
    """JSON with nested objects indented and every list on one line."""
    def emit(o, indent):
        pad = " " * indent
        if isinstance(o, dict) and o:
            items = [f'{pad} {json.dumps(k, ensure_ascii=False)}: {emit(v, indent + 1)}' for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        if isinstance(o, list) and o and isinstance(o[0], dict):
            return "[\n" + ",\n".join(pad + " " + emit(v, indent + 1) for v in o) + "\n" + pad + "]"
        return json.dumps(o, ensure_ascii=False, separators=(",", ":"))
    Path(path).write_text(emit(obj, 0) + "\n", encoding="utf-8")


def main():
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=here.parent.parent / "models")
    ap.add_argument("--out", type=Path, default=here / "transformers_logits.json")
    ap.add_argument("--llamacpp", type=Path, default=here / "llamacpp_logits.json",
                    help="llama.cpp reference to cross-check against (skipped if missing)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)

    out = {
        "generator": "tests/reference/make_transformers_refs.py",
        "date": datetime.date.today().isoformat(),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "python": platform.python_version()},
        "load": 'LlamaForCausalLM.from_pretrained(dir, torch_dtype=torch.float32, attn_implementation="eager"), CPU',
        "tokenizer": "AutoTokenizer.from_pretrained(dir)(prompt).input_ids (adds BOS)",
        "greedy": (f"manual loop: {N_GREEDY} x argmax (first maximum) of the last-position logits of a full forward "
                   "pass over prompt + tokens so far (use_cache=False); no stop at EOS"),
        "n_greedy": N_GREEDY,
        "logits_after": AFTER,
        "logits_precision": "float32 (full; each value is a float32 written as a Python float)",
        "models": {},
    }
    for name in MODELS:
        d = args.models_dir / name / "hf"
        tok = AutoTokenizer.from_pretrained(d)
        model = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
        model.eval()
        entry = {"dir": f"models/{name}/hf", "model_safetensors_sha256": sha256_file(d / "model.safetensors"),
                 "tokenizer_class": type(tok).__name__, "vocab_size": model.config.vocab_size, "prompts": []}
        print(f"{name}: {type(tok).__name__}, vocab {model.config.vocab_size}", flush=True)
        for prompt in PROMPTS:
            ids = tok(prompt).input_ids
            greedy, last, after = run(model, ids)
            entry["prompts"].append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": greedy,
                                     "last_logits": floats(last), "logits_after_16": floats(after)})
            print(f"  {prompt!r}: ids {ids}, greedy {greedy[:8]}...", flush=True)
        out["models"][name] = entry
    if args.llamacpp.exists():
        out["crosscheck"] = crosscheck(out, args.llamacpp)
        for key, c in out["crosscheck"]["stories260k"].items():
            print(f"crosscheck stories260k transformers vs llama.cpp {key}: prompt ids equal "
                  f"{c['all_prompt_ids_equal']}, greedy equal {c['all_greedy_ids_equal']}, max |dlogit| last "
                  f"{c['max_abs_diff_last_logits']:.3g}, after 16 {c['max_abs_diff_logits_after_16']:.3g}")
            for p in c["prompts"]:
                print(f"   {p['prompt']!r}: greedy equal {p['greedy_ids_equal']} (first diff "
                      f"{p['first_greedy_difference']}), last {p['max_abs_diff_last_logits']:.3g}, "
                      f"after16 {p['max_abs_diff_logits_after_16']:.3g}")
    dump(out, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
