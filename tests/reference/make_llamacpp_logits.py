#!/usr/bin/env python3
"""Record llama.cpp's logits and greedy tokens for small GGUF models, for tgi's inference engine tests.

This is how tests/reference/llamacpp_logits.json was made (see README.md there). It drives an already-built
libllama through the ctypes binding of the llama-cpp-python source package (no compiled extension, nothing is
built), and makes its GGUF inputs with tgi's own binaries:

    LLAMA_CPP_LIB_PATH=/path/to/llama.cpp/build/bin PYTHONPATH=/path/to/llama_cpp_python-0.3.36 \\
        python3 tests/reference/make_llamacpp_logits.py --tgi target/release/tgi \\
            --make-checkpoint target/release/make-checkpoint --work DIR

LLAMA_CPP_LIB_PATH is the directory with libllama.so (llama_cpp/llama_cpp.py loads LIB_PATH/libllama.so; the
libggml*.so beside it are found through its rpath); PYTHONPATH holds the unpacked sdist whose `llama_cpp/`
package must match that libllama's llama.h (struct layouts are not checked at run time). The package imports
numpy, typing_extensions, jinja2 and diskcache.

Models (GGUF files written into --work):
- stories260k: models/stories260k/stories260k-f32.gguf (committed) and `tgi quantize models/stories260k/hf
  --type q8_0`. Five prompts; prompt ids, 48 greedy ids, the logits at the last prompt position and after 16
  greedy tokens, full vocabulary (512), at full float32 precision. The F32 file is run a second time with an F32
  KV cache (`f32_kv_f32`; llama.cpp's default KV cache is F16).
- tiny-2l: a random-weight checkpoint from `make-checkpoint --shape tiny-2l --dtype f16 --seed 0` (hidden 256,
  2 layers, Llama 2's 32000-token vocabulary), converted with `tgi quantize DIR --type T` for T in f32, q8_0,
  q6_k, q4_k_m (so the k-quant kernels run). Two prompts; prompt ids, 16 greedy ids, the top-20 ids and the
  last-position logits rounded to 6 significant digits.

Each run is done twice with fresh contexts; `deterministic` says whether the logits were bit-identical.
"""

import argparse
import ctypes
import datetime
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

try:
    import llama_cpp.llama_cpp as L
except Exception as e:  # noqa: BLE001
    sys.exit(f"cannot import llama_cpp (set PYTHONPATH to the llama-cpp-python sdist and LLAMA_CPP_LIB_PATH "
             f"to the directory with libllama.so): {e}")

STORIES_PROMPTS = [
    "Once upon a time",
    "Lily and Ben were playing in the",
    "The cat",
    " Tom had a big red ball. He",
    "Sue liked to eat apples.\nOne day",
]
STORIES_N_GREEDY = 48
STORIES_AFTER = 16  # logits_after_16: after prompt + the first 16 greedy tokens
TINY_PROMPTS = ["Once upon a time", "The quick brown fox jumps over the lazy dog"]
TINY_N_GREEDY = 16
TINY_TYPES = ["f32", "q8_0", "q6_k", "q4_k_m"]
TINY_SEED = 0
TINY_TOPK = 20
N_CTX = 512
N_BATCH = 512
N_THREADS = 2
GGML_TYPES = {0: "F32", 1: "F16", 30: "BF16"}  # KV cache types (llama.cpp's default is F16)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@L.llama_log_callback
def _quiet_log(level, text, user_data):  # llama.cpp's log lines are noise here
    pass


class Model:
    def __init__(self, path, kv_type=None):
        self.kv_type = kv_type  # None: llama.cpp's default KV cache type (F16)
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model_params = {"n_gpu_layers": mp.n_gpu_layers, "load_mode": mp.load_mode,
                             "use_extra_bufts": bool(mp.use_extra_bufts)}
        self.model = L.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama_model_load_from_file failed for {path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)

    def tokenize(self, text):
        data = text.encode("utf-8")
        buf = (L.llama_token * (len(data) + 8))()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, len(buf), True, False)
        if n < 0:
            raise RuntimeError(f"llama_tokenize: {n}")
        return [int(buf[i]) for i in range(n)]

    def context_params(self):
        cp = L.llama_context_default_params()
        cp.n_ctx = N_CTX
        cp.n_batch = N_BATCH
        cp.n_ubatch = N_BATCH
        cp.n_threads = N_THREADS
        cp.n_threads_batch = N_THREADS
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        if self.kv_type is not None:
            cp.type_k = self.kv_type
            cp.type_v = self.kv_type
        return cp

    def context_settings(self):
        cp = self.context_params()
        return {"n_ctx": cp.n_ctx, "n_batch": cp.n_batch, "n_ubatch": cp.n_ubatch, "n_threads": cp.n_threads,
                "n_threads_batch": cp.n_threads_batch,
                "flash_attn_type": L.llama_flash_attn_type_name(cp.flash_attn_type).decode(),
                "type_k": GGML_TYPES.get(cp.type_k, cp.type_k), "type_v": GGML_TYPES.get(cp.type_v, cp.type_v),
                **self.model_params}

    def run(self, prompt_ids, n_greedy, after=None):
        """Decode the prompt in one batch, then greedy-decode n_greedy tokens one at a time.
        Returns (last-prompt-position logits, greedy ids, logits after `after` greedy tokens or None)."""
        ctx = L.llama_init_from_model(self.model, self.context_params())
        if not ctx:
            raise RuntimeError("llama_init_from_model failed")
        try:
            def decode(ids):
                arr = (L.llama_token * len(ids))(*ids)
                rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids)))
                if rc != 0:
                    raise RuntimeError(f"llama_decode: {rc}")
                # llama_batch_get_one outputs logits for the last token only
                ptr = L.llama_get_logits_ith(ctx, -1)
                return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

            logits = decode(prompt_ids)
            last_logits = logits
            greedy, after_logits = [], None
            for i in range(n_greedy):
                tok = int(np.argmax(logits))  # first maximum, as llama.cpp's greedy sampler
                greedy.append(tok)
                if i + 1 == n_greedy:
                    break
                logits = decode([tok])
                if after is not None and i + 1 == after:
                    after_logits = logits
            if after is not None and after_logits is None:
                raise RuntimeError("after >= n_greedy")
            return last_logits, greedy, after_logits
        finally:
            L.llama_free(ctx)

    def close(self):
        L.llama_model_free(self.model)


def full(logits):
    return [float(x) for x in logits.astype(np.float32)]


def rounded(logits, digits=6):
    return [float(f"{float(x):.{digits}g}") for x in logits]


def run_twice(model, ids, n_greedy, after=None):
    a = model.run(ids, n_greedy, after)
    b = model.run(ids, n_greedy, after)
    same = (np.array_equal(a[0].view(np.uint32), b[0].view(np.uint32)) and a[1] == b[1]
            and (after is None or np.array_equal(a[2].view(np.uint32), b[2].view(np.uint32))))
    return a, same


def tgi_quantize(tgi, src, qtype, out):
    cmd = [str(tgi), "quantize", str(src), "--type", qtype, "-o", str(out), "--threads", "1", "--quiet", "--force"]
    subprocess.run(cmd, check=True)
    return cmd


def rel(path, root):
    try:
        return str(Path(path).resolve().relative_to(root))
    except ValueError:
        return str(path)


def build_info(lib_dir):
    """llama.cpp's version line ('version: ... (build N, commit X)'), printed by its tools."""
    for tool in ["llama-cli", "llama-simple", "llama-quantize"]:
        exe = Path(lib_dir) / tool
        if not exe.exists():
            continue
        p = subprocess.run([str(exe), "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           errors="replace", timeout=60)
        lines = [l.strip() for l in p.stdout.splitlines() if l.startswith(("version:", "built with"))]
        if lines:
            return " ; ".join(lines)
    return None


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
    root = here.parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tgi", type=Path, required=True, help="tgi binary (for `tgi quantize`)")
    ap.add_argument("--make-checkpoint", type=Path, required=True, help="make-checkpoint binary")
    ap.add_argument("--work", type=Path, required=True, help="directory for the checkpoint and GGUF files")
    ap.add_argument("--models-dir", type=Path, default=root / "models")
    ap.add_argument("--out", type=Path, default=here / "llamacpp_logits.json")
    ap.add_argument("--source", default="llama-cpp-python 0.3.36 sdist from PyPI, vendor/llama.cpp @ 0c1e57098, "
                    "CPU build (GGML_NATIVE); Python binding llama_cpp/llama_cpp.py from the same sdist")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    lib_dir = os.environ.get("LLAMA_CPP_LIB_PATH")

    L.llama_log_set(_quiet_log, ctypes.c_void_p())
    L.llama_backend_init()

    out = {
        "generator": "tests/reference/make_llamacpp_logits.py",
        "date": datetime.date.today().isoformat(),
        "llama_cpp": {"source": args.source, "build_info": build_info(lib_dir) if lib_dir else None,
                      "system_info": L.llama_print_system_info().decode().strip(),
                      "binding": f"llama_cpp (llama-cpp-python) {getattr(sys.modules.get('llama_cpp'), '__version__', '?')}"},
        "method": ("llama_model_load_from_file; llama_init_from_model (settings below); llama_tokenize(add_special="
                   "true, parse_special=false); llama_decode of the whole prompt as one llama_batch_get_one batch "
                   "(logits of its last token); then greedy: argmax (first maximum) of the float32 logits, "
                   "decoded one token at a time, no stop at EOS; llama_get_logits_ith(ctx, -1)"),
        "settings": None,
        "deterministic": None,
        "models": {},
    }
    all_det = True

    # (a) stories260k, F32 and Q8_0
    st_hf = args.models_dir / "stories260k" / "hf"
    st_f32 = args.models_dir / "stories260k" / "stories260k-f32.gguf"
    st_q8 = args.work / "stories260k-q8_0.gguf"
    q8_cmd = tgi_quantize(args.tgi, st_hf, "q8_0", st_q8)
    q8_short = ["tgi", "quantize", "models/stories260k/hf"] + q8_cmd[3:5] + ["-o", "stories260k-q8_0.gguf"]
    # key: (file, command that made it, KV cache type override)
    files = {
        "f32": (st_f32, None, None),
        "q8_0": (st_q8, q8_short, None),
        "f32_kv_f32": (st_f32, None, L.GGML_TYPE_F32),
    }
    st = {"n_greedy": STORIES_N_GREEDY, "logits_after": STORIES_AFTER, "logits_precision": "float32 (full)",
          "files": {}}
    for key, (path, cmd, kv_type) in files.items():
        print(f"stories260k {key}: {path}", flush=True)
        m = Model(path, kv_type)
        if kv_type is None:
            out["settings"] = out["settings"] or m.context_settings()
        entry = {"file": rel(path, root) if cmd is None else path.name, "file_sha256": sha256_file(path)}
        if cmd:
            entry["command"] = " ".join(cmd)
        if kv_type is not None:
            entry["settings_override"] = {"type_k": GGML_TYPES[kv_type], "type_v": GGML_TYPES[kv_type]}
        entry["n_vocab"] = m.n_vocab
        entry["prompts"] = []
        det = True
        for prompt in STORIES_PROMPTS:
            ids = m.tokenize(prompt)
            (last, greedy, after), same = run_twice(m, ids, STORIES_N_GREEDY, STORIES_AFTER)
            det &= same
            entry["prompts"].append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": greedy,
                                     "last_logits": full(last), "logits_after_16": full(after)})
            print(f"  {prompt!r}: {len(ids)} ids, greedy {greedy[:8]}..., deterministic {same}", flush=True)
        entry["deterministic"] = det
        all_det &= det
        st["files"][key] = entry
        m.close()
    out["models"]["stories260k"] = st

    # (b) tiny-2l random-weight checkpoint, k-quants
    ck = args.work / "tiny2l"
    ck_cmd = ["make-checkpoint", "--shape", "tiny-2l", "--dtype", "f16", "--seed", str(TINY_SEED), "-o", "tiny2l"]
    subprocess.run([str(args.make_checkpoint)] + ck_cmd[1:-1] + [str(ck)], check=True, stdout=subprocess.DEVNULL)
    tiny = {"checkpoint": {"command": " ".join(ck_cmd), "seed": TINY_SEED,
                           "model_safetensors_sha256": sha256_file(ck / "model.safetensors"),
                           "config_sha256": sha256_file(ck / "config.json")},
            "n_greedy": TINY_N_GREEDY, "top_k": TINY_TOPK,
            "logits_precision": "rounded to 6 significant digits (float(f'{x:.6g}'))", "files": {}}
    for qtype in TINY_TYPES:
        path = args.work / f"tiny2l-{qtype}.gguf"
        tgi_quantize(args.tgi, ck, qtype, path)
        print(f"tiny-2l {qtype}: {path}", flush=True)
        m = Model(path)
        entry = {"file": path.name, "command": f"tgi quantize tiny2l --type {qtype} -o {path.name}",
                 "file_size": path.stat().st_size, "file_sha256": sha256_file(path), "n_vocab": m.n_vocab,
                 "prompts": []}
        det = True
        for prompt in TINY_PROMPTS:
            ids = m.tokenize(prompt)
            (last, greedy, _), same = run_twice(m, ids, TINY_N_GREEDY)
            det &= same
            top = [int(i) for i in np.argsort(-last, kind="stable")[:TINY_TOPK]]
            entry["prompts"].append({"prompt": prompt, "prompt_ids": ids, "greedy_ids": greedy, "top20_ids": top,
                                     "top20_logits": full(last[top]),
                                     "last_logits_max": float(last.max()), "last_logits_mean": float(last.mean(dtype=np.float64)),
                                     "last_logits_std": float(last.std(dtype=np.float64)),
                                     "last_logits": rounded(last)})
            print(f"  {prompt!r}: {len(ids)} ids, greedy {greedy[:8]}..., top {top[:5]}, deterministic {same}",
                  flush=True)
        entry["deterministic"] = det
        all_det &= det
        tiny["files"][qtype] = entry
        m.close()
    out["models"]["tiny-2l"] = tiny
    out["deterministic"] = all_det
    L.llama_backend_free()
    dump(out, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes), deterministic {all_det}")


if __name__ == "__main__":
    main()
