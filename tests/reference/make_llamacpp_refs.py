#!/usr/bin/env python3
"""Record what llama.cpp's own tools produce for the fixture models, for tgi's exactness tests.

This is how tests/reference/llamacpp_{quant,greedy,perplexity}.json were made (see README.md there). It runs
already-built llama.cpp binaries; it never builds llama.cpp.

    python3 tests/reference/make_llamacpp_refs.py LLAMA_BIN_DIR [--models-dir DIR] [--source TEXT]

LLAMA_BIN_DIR holds llama-quantize, llama-simple and llama-perplexity (and the shared libraries they need, found
through their rpath or LD_LIBRARY_PATH). For each fixture's F32 GGUF (DIR/NAME/NAME-f32.gguf) it records:

1. llamacpp_quant.json: the SHA-256 of every tensor of the F32 input, and for every preset the output of
   `llama-quantize IN OUT TYPE THREADS` (no imatrix) read back with gguf-py: general.file_type, the
   quantization version, each tensor's type, shape (ggml order, fastest dimension first) and SHA-256 of its data,
   and the hashes of the whole file and of its header; or the error when llama-quantize refuses the preset.
2. llamacpp_greedy.json: the text `llama-simple -n 32 PROMPT` (greedy sampling) prints for the F32 input and for
   llama-quantize's Q8_0 and Q4_K_M outputs, run twice to check that it is deterministic.
3. llamacpp_perplexity.json: `llama-perplexity` on the first 32 chunks of 128 tokens of
   models/stories-distill-4l/text/heldout.txt for the F32 input and every preset's output (any byte difference in a
   file shows up in the fourth decimal).

Needs: python3 with `gguf` and `numpy` (tests/python/requirements.txt).
"""

import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from gguf import GGUFReader

MODELS = ["stories-distill-4l", "stories260k"]
# tgi preset name -> llama-quantize type name.
PRESETS = {
    "q8_0": "Q8_0",
    "q4_0": "Q4_0",
    "q4_1": "Q4_1",
    "q5_0": "Q5_0",
    "q5_1": "Q5_1",
    "q2_k": "Q2_K",
    "q3_k_m": "Q3_K_M",
    "q4_k_s": "Q4_K_S",
    "q4_k_m": "Q4_K_M",
    "q5_k_s": "Q5_K_S",
    "q5_k_m": "Q5_K_M",
    "q6_k": "Q6_K",
    "f16": "F16",
    "bf16": "BF16",
    "f32": "F32",
}
GREEDY_PRESETS = ["f32", "q8_0", "q4_k_m"]
PPL_TEXT = "stories-distill-4l/text/heldout.txt"  # under --models-dir; both fixtures share the tokenizer
PPL_ARGS = ["-c", "128", "--chunks", "32", "-b", "512"]
PROMPT = "Once upon a time"
N_PREDICT = 32
BUILD_INFO = []  # version lines of each llama-quantize run
KV_KEYS = ["general.file_type", "general.quantization_version"]


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kv_value(field):
    value = field.contents()
    return value.item() if hasattr(value, "item") else value


def describe_gguf(path):
    """Per-tensor type/shape/hash plus the selected KVs and whole-file hashes of a GGUF file."""
    reader = GGUFReader(path)
    tensors = {}
    for t in reader.tensors:
        start = int(t.data_offset)
        data = reader.data[start : start + int(t.n_bytes)]
        tensors[t.name] = {
            "type": t.tensor_type.name,
            "shape": [int(d) for d in t.shape],
            "sha256": hashlib.sha256(data.tobytes()).hexdigest(),
        }
    kv = {k: kv_value(reader.fields[k]) for k in KV_KEYS if k in reader.fields}
    with open(path, "rb") as f:
        header = f.read(int(reader.data_offset))
    user_keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    return {
        "file_size": os.path.getsize(path),
        "file_sha256": sha256_file(path),
        "header_sha256": hashlib.sha256(header).hexdigest(),
        "n_kv": len(user_keys),
        "kv": kv,
        "tensors": tensors,
    }


def run(cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")


def build_info(log):
    """llama.cpp's version lines, printed first by its tools ('version: ... (build N, commit X)', 'built with ...')."""
    lines = [l.strip() for l in log.splitlines() if l.startswith(("version:", "built with"))]
    return " ; ".join(lines) or None


def quantize(bin_dir, src, out, qtype, threads):
    cmd = [str(bin_dir / "llama-quantize"), str(src), str(out), qtype, str(threads)]
    p = run(cmd)
    BUILD_INFO.append(build_info(p.stderr))
    if p.returncode != 0 or not out.exists():
        tail = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()][-3:]
        return {"llama_quantize_type": qtype, "error": f"exit {p.returncode}: " + " | ".join(tail)}
    entry = {"llama_quantize_type": qtype}
    d = describe_gguf(out)
    entry["file_type"] = d["kv"].get("general.file_type")
    counts = {}
    for t in d["tensors"].values():
        counts[t["type"]] = counts.get(t["type"], 0) + 1
    entry["type_counts"] = dict(sorted(counts.items()))
    entry.update(d)
    return entry


def greedy(bin_dir, path):
    cmd = [str(bin_dir / "llama-simple"), "-m", str(path), "-n", str(N_PREDICT), PROMPT]
    outs = []
    for _ in range(2):
        p = run(cmd)
        if p.returncode != 0:
            tail = [l for l in p.stderr.splitlines() if l.strip()][-3:]
            return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
        outs.append(p.stdout)
    return {"file_sha256": sha256_file(path), "stdout": outs[0], "deterministic": outs[0] == outs[1]}


def perplexity(bin_dir, path, text, threads, tries=10):
    """The 'Final estimate' PPL. llama.cpp's logging thread can lose the last lines at exit (llama.cpp issue
    #22142: the logger is leaked, not flushed), so a run without that line is repeated."""
    cmd = [str(bin_dir / "llama-perplexity"), "-m", str(path), "-f", str(text), *PPL_ARGS, "-t", str(threads)]
    for _ in range(tries):
        p = run(cmd)
        if p.returncode != 0:
            tail = [l for l in p.stderr.splitlines() if l.strip()][-3:]
            return {"error": f"exit {p.returncode}: " + " | ".join(tail)}
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", p.stderr + p.stdout)
        if m:
            return {"file_sha256": sha256_file(path), "ppl": float(m.group(1)), "ppl_stderr": float(m.group(2))}
    return {"error": f"no 'Final estimate' line in {tries} runs"}


def dump(obj, path):
    """JSON with one line per tensor entry, to keep diffs readable and the file small."""
    def emit(o, indent):
        pad = " " * indent
        if isinstance(o, dict) and o and not ("sha256" in o and "type" in o):
            items = [f'{pad} {json.dumps(k, ensure_ascii=False)}: {emit(v, indent + 1)}' for k, v in o.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        return json.dumps(o, ensure_ascii=False)
    Path(path).write_text(emit(obj, 0) + "\n", encoding="utf-8")


def main():
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir", type=Path, help="directory with llama-quantize, llama-simple and llama-perplexity")
    ap.add_argument("--models-dir", type=Path, default=here.parent.parent / "models",
                    help="holds NAME/NAME-f32.gguf for each fixture (default: the repository's models/)")
    ap.add_argument("--out-dir", type=Path, default=here, help="where the JSON files go (default: next to this script)")
    ap.add_argument("--source", default=None, help="where the llama.cpp build came from, recorded as is")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="keep the quantized GGUF files in this directory")
    args = ap.parse_args()

    for tool in ["llama-quantize", "llama-simple", "llama-perplexity"]:
        if not (args.bin_dir / tool).exists():
            sys.exit(f"{args.bin_dir / tool} not found")
    llama_cpp = {"source": args.source, "build_info": None}
    date = datetime.date.today().isoformat()
    work = args.keep or Path(tempfile.mkdtemp(prefix="llamacpp-refs-"))
    work.mkdir(parents=True, exist_ok=True)

    quant = {"generator": "tests/reference/make_llamacpp_refs.py", "llama_cpp": llama_cpp, "date": date,
             "threads": args.threads, "models": {}}
    greedy_refs = {"generator": "tests/reference/make_llamacpp_refs.py", "llama_cpp": llama_cpp, "date": date,
                   "tool": "llama-simple (greedy sampler)", "prompt": PROMPT, "n_predict": N_PREDICT, "models": {}}
    ppl_text = args.models_dir / PPL_TEXT
    ppl_refs = {"generator": "tests/reference/make_llamacpp_refs.py", "llama_cpp": llama_cpp, "date": date,
                "tool": "llama-perplexity", "text": f"models/{PPL_TEXT}", "text_sha256": sha256_file(ppl_text),
                "args": PPL_ARGS + ["-t", str(args.threads)], "models": {}}
    for name in MODELS:
        src = args.models_dir / name / f"{name}-f32.gguf"
        if not src.exists():
            sys.exit(f"{src} not found (pass --models-dir)")
        print(f"{name}: {src}", flush=True)
        d = describe_gguf(src)
        entry = {"input_f32": {"file": f"{name}-f32.gguf", **d}, "presets": {}}
        outs = {}
        for preset, qtype in PRESETS.items():
            out = work / f"{name}-{preset}.gguf"
            if out.exists():
                out.unlink()
            r = quantize(args.bin_dir, src, out, qtype, args.threads)
            entry["presets"][preset] = r
            status = r.get("error") or f"file_type {r['file_type']}, types " + ",".join(
                sorted({t["type"] for t in r["tensors"].values()}))
            print(f"  {qtype:7} {status}", flush=True)
            if "error" not in r:
                outs[preset] = out
        quant["models"][name] = entry
        g = {}
        for preset in GREEDY_PRESETS:
            path = src if preset == "f32" else outs.get(preset)
            g[preset] = greedy(args.bin_dir, path) if path else {"error": "llama-quantize failed"}
            print(f"  greedy {preset}: {g[preset].get('stdout', g[preset].get('error'))!r}", flush=True)
        greedy_refs["models"][name] = g
        ppl_refs["models"][name] = {}
        for preset in ["f32", *[p for p in PRESETS if p != "f32"]]:
            path = src if preset == "f32" else outs.get(preset)
            r = perplexity(args.bin_dir, path, ppl_text, args.threads) if path else {"error": "llama-quantize failed"}
            ppl_refs["models"][name][preset] = r
            print(f"  ppl {preset}: {r.get('ppl', r.get('error'))}", flush=True)
    infos = sorted({b for b in BUILD_INFO if b})
    llama_cpp["build_info"] = infos[0] if len(infos) == 1 else infos
    args.out_dir.mkdir(parents=True, exist_ok=True)
    dump(quant, args.out_dir / "llamacpp_quant.json")
    dump(greedy_refs, args.out_dir / "llamacpp_greedy.json")
    dump(ppl_refs, args.out_dir / "llamacpp_perplexity.json")
    print(f"wrote llamacpp_quant.json, llamacpp_greedy.json and llamacpp_perplexity.json in {args.out_dir}")


if __name__ == "__main__":
    main()
