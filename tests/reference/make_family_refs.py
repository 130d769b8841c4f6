#!/usr/bin/env python3
"""Make the tiny random-weight checkpoints of the non-Llama families and record transformers' float32 logits
and greedy tokens for them, for tgi's engine tests (tests/families.rs).

This is how models/tiny-FAMILY/hf/ and tests/reference/families/ were made (see README.md there):

    /work/torchenv/bin/python tests/reference/make_family_refs.py [--models-dir models] [--out tests/reference/families]

For each family: a small config of that family (hidden 64, 2-3 layers, the stories260k tokenizer's 512-token
vocabulary), weights drawn from `torch.manual_seed(SEED)` (matrices N(0, 0.15), norm weights around their
neutral value so that every norm matters), saved by `save_pretrained` as float32 with the stories260k
tokenizer files beside them. Then, loaded back with `from_pretrained(dir, dtype=torch.float32,
attn_implementation="eager")` on CPU, for each prompt: `prompt_ids`, 32 `greedy_ids` (argmax, first maximum, of
full forward passes without a KV cache, no stop at EOS) into FAMILY.json, and the logits at every position of
prompt + the first 31 greedy tokens (`[positions, 512]` float32) as tensor `pN` of FAMILY.safetensors.

Needs: torch, transformers, safetensors. Runs on CPU in a few seconds. Deterministic: the same versions give
byte-identical files.
"""

import argparse
import json
import platform
import shutil
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

SEED = 0
N_GREEDY = 32
PROMPTS = ["Once upon a time", "Lily and Ben were playing in the", "The cat"]
# The MoE families' routing is recorded on this prompt.
PROMPTS_ROUTED = "Sue liked to eat apples.\nOne day"
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"]
COMMON = dict(vocab_size=512, hidden_size=64, max_position_embeddings=512, bos_token_id=1, eos_token_id=2,
              pad_token_id=None, tie_word_embeddings=True, rms_norm_eps=1e-6)

FAMILIES = {
    # Per-head q/k RMSNorm, no qkv bias, head_dim (16) not hidden / heads (8).
    "qwen3": ("Qwen3ForCausalLM", transformers.Qwen3Config(
        **COMMON, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
        head_dim=16, rope_theta=1e6)),
    # (1+w) norms, pre/post norms, GeGLU, soft-caps, sliding window of 5 on even layers, embedding scaling.
    "gemma2": ("Gemma2ForCausalLM", transformers.Gemma2Config(
        **COMMON, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, query_pre_attn_scalar=16, sliding_window=5, attn_logit_softcapping=5.0,
        final_logit_softcapping=8.0, hidden_activation="gelu_pytorch_tanh", rope_theta=10000.0)),
    # Five sliding layers (window 5, RoPE base 10^4) to one global (base 10^6, linear scaling 2), q/k norms.
    "gemma3": ("Gemma3ForCausalLM", transformers.Gemma3TextConfig(
        **COMMON, intermediate_size=64, num_hidden_layers=6, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, query_pre_attn_scalar=16, sliding_window=5, hidden_activation="gelu_pytorch_tanh",
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    # Fused qkv_proj and gate_up_proj, RoPE on half of each head (partial_rotary_factor 0.5) with LongRoPE's
    # short factors (every sequence here is shorter than original_max_position_embeddings) and attention factor.
    "phi3": ("Phi3ForCausalLM", transformers.Phi3Config(
        **{**COMMON, "rms_norm_eps": 1e-5}, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, original_max_position_embeddings=256, sliding_window=None,
        rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                         "original_max_position_embeddings": 256, "short_factor": [1.0, 1.5, 2.0, 3.0],
                         "long_factor": [2.0, 3.0, 4.0, 5.0]})),
    # 4 experts of width 32, 2 per token; Qwen3-MoE renormalizes the chosen softmax weights (norm_topk_prob).
    "qwen3moe": ("Qwen3MoeForCausalLM", transformers.Qwen3MoeConfig(
        **COMMON, intermediate_size=96, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
        norm_topk_prob=True, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        rope_theta=1e6)),
    # Mixtral: softmax over the chosen experts' logits; Llama attention (rotary halves, permuted in GGUF).
    "mixtral": ("MixtralForCausalLM", transformers.MixtralConfig(
        **COMMON, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6)),
}


@torch.no_grad()
def randomize(model, family):
    torch.manual_seed(SEED)
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            # Gemma's norms scale by (1 + w): neutral at 0; the others' at 1.
            centre = 0.0 if family.startswith("gemma") else 1.0
            p.copy_(centre + 0.2 * torch.randn_like(p))
        elif name.endswith("embed_tokens.weight") and family.startswith("gemma"):
            # Gemma multiplies embeddings by sqrt(hidden) = 8.
            p.copy_(0.15 / 8 * torch.randn_like(p))
        else:
            p.copy_(0.15 * torch.randn_like(p))


@torch.no_grad()
def routing(model, tensors, prompt, tok, entry):
    """Each MoE layer's router logits, chosen experts and their weights for every position of `prompt` (tensors
    `routing.lN.logits` f32, `.experts` i64 and `.weights` f32), captured from the router modules."""
    captured = {}
    hooks = [layer.mlp.gate.register_forward_hook(lambda m, i, o, n=n: captured.__setitem__(n, o))
             for n, layer in enumerate(model.model.layers)]
    model(torch.tensor([tok(prompt).input_ids]), use_cache=False)
    for h in hooks:
        h.remove()
    for n, (logits, weights, experts) in sorted(captured.items()):
        tensors[f"routing.l{n}.logits"] = logits.to(torch.float32).contiguous()
        tensors[f"routing.l{n}.experts"] = experts.to(torch.int64).contiguous()
        tensors[f"routing.l{n}.weights"] = weights.to(torch.float32).contiguous()
        counts = torch.bincount(experts.flatten(), minlength=logits.shape[-1]).tolist()
        print(f"  layer {n}: tokens per expert {counts}")
    entry["routing_prompt"] = prompt


@torch.no_grad()
def greedy(model, ids):
    seq = list(ids)
    for _ in range(N_GREEDY):
        logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids):]


def main():
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models-dir", type=Path, default=here.parent.parent / "models")
    ap.add_argument("--out", type=Path, default=here / "families")
    ap.add_argument("--only", nargs="*", help="families to make (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer_dir = args.models_dir / "stories260k" / "hf"
    tok = transformers.AutoTokenizer.from_pretrained(tokenizer_dir)
    for family, (cls_name, cfg) in FAMILIES.items():
        if args.only and family not in args.only:
            continue
        cls = getattr(transformers, cls_name)
        d = args.models_dir / f"tiny-{family}" / "hf"
        d.mkdir(parents=True, exist_ok=True)
        model = cls(cfg).to(torch.float32)
        randomize(model, family)
        model.save_pretrained(d, safe_serialization=True)
        for f in TOKENIZER_FILES:
            shutil.copy(tokenizer_dir / f, d / f)
        model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        entry = {"generator": "tests/reference/make_family_refs.py", "class": cls_name, "dir": f"models/tiny-{family}/hf",
                 "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                              "python": platform.python_version()},
                 "n_greedy": N_GREEDY, "prompts": []}
        tensors = {}
        for i, prompt in enumerate(PROMPTS):
            ids = tok(prompt).input_ids
            g = greedy(model, ids)
            with torch.no_grad():
                logits = model(torch.tensor([ids + g[:-1]]), use_cache=False).logits[0]
            tensors[f"p{i}"] = logits.to(torch.float32).contiguous()
            top2 = torch.topk(logits[len(ids) - 1:], 2).values
            margin = float((top2[:, 0] - top2[:, 1]).min())
            entry["prompts"].append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": g, "logits": f"p{i}"})
            print(f"{family}: {prompt!r}: ids {ids}, greedy {g[:8]}..., smallest top-2 margin {margin:.2g}", flush=True)
        if hasattr(cfg, "num_experts_per_tok"):
            routing(model, tensors, PROMPTS_ROUTED, tok, entry)
        save_file(tensors, args.out / f"{family}.safetensors")
        (args.out / f"{family}.json").write_text(json.dumps(entry, indent=1) + "\n")
        size = (d / "model.safetensors").stat().st_size
        print(f"{family}: {d} ({size} bytes of weights)")


if __name__ == "__main__":
    main()
