#!/usr/bin/env python3
"""The peer of bench/gpu/check.py: transformers + PyTorch generating from a Hugging Face checkpoint, greedy, a
static batch of 128-token prompts (random ids), exactly --new-tokens new tokens each; F16 on a GPU, F32 on the CPU
(where F16 matmuls are not what PyTorch is fast at). Writes {"status": "ok", "batch_N": {tok_s, seconds, tokens}}."""

import argparse
import json
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--batches", default="1,32")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    device = "cuda" if args.device.startswith("cuda") else "cpu"
    dtype = torch.float16 if device == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
    vocab = model.config.vocab_size
    result = {"status": "ok", "torch": torch.__version__, "transformers": transformers.__version__, "dtype": str(dtype)}
    gen = torch.Generator().manual_seed(0)
    for batch in [int(b) for b in args.batches.split(",")]:
        ids = torch.randint(3, vocab, (batch, args.prompt_tokens), generator=gen).to(device)
        kwargs = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False,
                      attention_mask=torch.ones_like(ids), pad_token_id=0)
        with torch.inference_mode():
            model.generate(ids, **{**kwargs, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kwargs)
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
        tokens = (out.shape[1] - args.prompt_tokens) * batch
        result[f"batch_{batch}"] = {"tok_s": tokens / seconds, "seconds": seconds, "tokens": tokens}
        if device == "cuda":
            result[f"batch_{batch}"]["max_gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
