#!/usr/bin/env python3
"""Record what `llama-quantize --imatrix` writes for stories-distill-4l, for tgi's importance-matrix exactness tests.

This is how tests/reference/llamacpp_imatrix_quant.json was made (see README.md there). It runs an already-built
llama-quantize; it never builds llama.cpp.

    python3 tests/reference/make_imatrix_quant_refs.py LLAMA_BIN_DIR [--models-dir DIR]

The importance matrix is tests/reference/imatrix/stories-distill-4l.imatrix.gguf, made from the F32 model with

    llama-imatrix -m stories-distill-4l-f32.gguf -f models/stories-distill-4l/text/calibration.txt \\
        -c 128 --chunks 24 --process-output -o stories-distill-4l.imatrix.gguf

For each type below it runs `llama-quantize --imatrix MATRIX [FILTERS] DIR/stories-distill-4l/stories-distill-4l-f32.gguf
OUT TYPE THREADS` and records, read back with gguf-py: general.file_type, the quantize.imatrix.* metadata (the file
key holds the path given: the script runs from the repository root and passes the relative path), each tensor's
type, shape and SHA-256 of its data.
Besides the plain runs, two record the name filters: `--exclude-weights ffn_down` and `--include-weights attn_v`.

Needs: python3 with `gguf` and `numpy` (tests/python/requirements.txt).
"""

import argparse
import datetime
import os
import sys
from pathlib import Path

import make_llamacpp_refs as refs

MODEL = "stories-distill-4l"
MATRIX = "tests/reference/imatrix/stories-distill-4l.imatrix.gguf"
# run name -> (llama-quantize type, extra llama-quantize arguments).
RUNS = {
    "q2_k": ("Q2_K", []),
    "q3_k_m": ("Q3_K_M", []),
    "q4_k_m": ("Q4_K_M", []),
    "q5_k_m": ("Q5_K_M", []),
    "q6_k": ("Q6_K", []),
    "q4_0": ("Q4_0", []),
    "q4_1": ("Q4_1", []),
    "q5_0": ("Q5_0", []),
    "q5_1": ("Q5_1", []),
    "q4_k_m+exclude=ffn_down": ("Q4_K_M", ["--exclude-weights", "ffn_down"]),
    "q3_k_m+include=attn_v": ("Q3_K_M", ["--include-weights", "attn_v"]),
}
IMATRIX_KEYS = [
    "quantize.imatrix.file",
    "quantize.imatrix.dataset",
    "quantize.imatrix.entries_count",
    "quantize.imatrix.chunks_count",
]


def quantize(bin_dir, matrix, extra, src, out, qtype, threads):
    cmd = [str(bin_dir / "llama-quantize"), "--imatrix", str(matrix), *extra, str(src), str(out), qtype, str(threads)]
    p = refs.run(cmd)
    refs.BUILD_INFO.append(refs.build_info(p.stderr))
    if p.returncode != 0 or not out.exists():
        tail = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()][-3:]
        return {"llama_quantize_type": qtype, "args": extra, "error": f"exit {p.returncode}: " + " | ".join(tail)}
    d = refs.describe_gguf(out)
    reader = refs.GGUFReader(out)
    imatrix = {k: refs.kv_value(reader.fields[k]) for k in IMATRIX_KEYS if k in reader.fields}
    return {
        "llama_quantize_type": qtype,
        "args": extra,
        "file_type": d["kv"].get("general.file_type"),
        "imatrix_kv": imatrix,
        "tensors": d["tensors"],
    }


def main():
    root = Path(__file__).resolve().parent.parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir", type=Path, help="directory with llama-quantize")
    ap.add_argument("--models-dir", type=Path, default=root / "models",
                    help=f"holds {MODEL}/{MODEL}-f32.gguf (default: the repository's models/)")
    ap.add_argument("--out", type=Path, default=root / "tests/reference/llamacpp_imatrix_quant.json")
    ap.add_argument("--source", default=None, help="where the llama.cpp build came from, recorded as is")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/imatrix-quant-refs"), help="scratch directory")
    args = ap.parse_args()

    if not (args.bin_dir / "llama-quantize").exists():
        sys.exit(f"{args.bin_dir / 'llama-quantize'} not found")
    # Run from the repository root so that quantize.imatrix.file records the relative path tgi's test passes.
    os.chdir(root)
    src = args.models_dir.resolve() / MODEL / f"{MODEL}-f32.gguf"
    matrix = Path(MATRIX)
    for p in [src, matrix]:
        if not p.exists():
            sys.exit(f"{p} not found")
    args.work.mkdir(parents=True, exist_ok=True)
    llama_cpp = {"source": args.source, "build_info": None}
    result = {
        "generator": "tests/reference/make_imatrix_quant_refs.py",
        "llama_cpp": llama_cpp,
        "date": datetime.date.today().isoformat(),
        "threads": args.threads,
        "model": MODEL,
        "imatrix": {"file": MATRIX, "sha256": refs.sha256_file(matrix)},
        "runs": {},
    }
    for name, (qtype, extra) in RUNS.items():
        out = args.work / f"{MODEL}-{name.replace('+', '-').replace('=', '-')}.gguf"
        if out.exists():
            out.unlink()
        r = quantize(args.bin_dir, matrix, extra, src, out, qtype, args.threads)
        result["runs"][name] = r
        print(f"  {name:24} {r.get('error') or r['imatrix_kv']}", flush=True)
    infos = sorted({b for b in refs.BUILD_INFO if b})
    llama_cpp["build_info"] = infos[0] if len(infos) == 1 else infos
    refs.dump(result, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
