#!/usr/bin/env python3
"""Record what `llama-quantize` writes for IQ4_NL and IQ4_XS, with and without an importance matrix, and
llama-perplexity on its IQ4_XS file, for tgi's IQ4 tests (tests/quantize_iq4.rs).

This is how tests/reference/llamacpp_iq4_quant.json was made (see README.md there). It runs an already-built
llama.cpp; it never builds it.

    python3 tests/reference/make_iq4_quant_refs.py LLAMA_BIN_DIR [--models-dir DIR]

Runs, each recorded as make_imatrix_quant_refs.py records them (general.file_type, the quantize.imatrix.*
metadata, each tensor's type, shape and SHA-256, the whole file's SHA-256 and the input's):
  * stories-distill-4l: `llama-quantize [--imatrix MATRIX] DIR/stories-distill-4l/stories-distill-4l-f32.gguf OUT
    TYPE THREADS` for IQ4_NL and IQ4_XS, MATRIX the committed tests/reference/imatrix/stories-distill-4l.imatrix.gguf;
  * stories260k (64-wide rows, so IQ4_XS falls back to IQ4_NL): the committed models/stories260k/stories260k-f32.gguf,
    without a matrix.
Then `llama-perplexity -m OUT -f models/stories-distill-4l/text/heldout.txt -c 128 --chunks 32 -b 512 -t THREADS` on
stories-distill-4l's IQ4_XS files (the arguments of llamacpp_perplexity.json).

Needs: python3 with `gguf` and `numpy` (tests/python/requirements.txt).
"""

import argparse
import datetime
import os
import sys
from pathlib import Path

import make_imatrix_quant_refs as imq
import make_llamacpp_refs as refs

MATRIX = imq.MATRIX
TYPES = {"iq4_nl": "IQ4_NL", "iq4_xs": "IQ4_XS"}


def main():
    root = Path(__file__).resolve().parent.parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir", type=Path, help="directory with llama-quantize and llama-perplexity")
    ap.add_argument("--models-dir", type=Path, default=root / "models",
                    help="holds stories-distill-4l/stories-distill-4l-f32.gguf (default: the repository's models/)")
    ap.add_argument("--out", type=Path, default=root / "tests/reference/llamacpp_iq4_quant.json")
    ap.add_argument("--source", default=None, help="where the llama.cpp build came from, recorded as is")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/iq4-quant-refs"), help="scratch directory")
    args = ap.parse_args()

    os.chdir(root)
    distill = args.models_dir.resolve() / "stories-distill-4l/stories-distill-4l-f32.gguf"
    stories = root / "models/stories260k/stories260k-f32.gguf"
    text = Path("models/stories-distill-4l/text/heldout.txt")
    for p in [distill, stories, Path(MATRIX), text]:
        if not p.exists():
            sys.exit(f"{p} not found")
    args.work.mkdir(parents=True, exist_ok=True)
    llama_cpp = {"source": args.source, "build_info": None}
    result = {
        "generator": "tests/reference/make_iq4_quant_refs.py",
        "llama_cpp": llama_cpp,
        "date": datetime.date.today().isoformat(),
        "threads": args.threads,
        "imatrix": {"file": MATRIX, "sha256": refs.sha256_file(Path(MATRIX))},
        "perplexity": {"text": str(text), "args": refs.PPL_ARGS + ["-t", str(args.threads)]},
        "runs": {},
    }
    jobs = []
    for name, qtype in TYPES.items():
        jobs.append((f"stories-distill-4l+{name}", "stories-distill-4l", distill, qtype, []))
        jobs.append((f"stories-distill-4l+{name}+imatrix", "stories-distill-4l", distill, qtype, ["--imatrix", MATRIX]))
        jobs.append((f"stories260k+{name}", "stories260k", stories, qtype, []))
    for name, model, src, qtype, extra in jobs:
        out = args.work / f"{name.replace('+', '-')}.gguf"
        if out.exists():
            out.unlink()
        r = run(args.bin_dir, extra, src, out, qtype, args.threads)
        r["model"] = model
        r["input_sha256"] = refs.sha256_file(src)
        if "error" not in r and model == "stories-distill-4l" and qtype == "IQ4_XS":
            r["perplexity"] = refs.perplexity(args.bin_dir, out, text, args.threads)
        result["runs"][name] = r
        print(f"  {name:40} {r.get('error') or r.get('perplexity') or r['file_type']}", flush=True)
    infos = sorted({b for b in refs.BUILD_INFO if b})
    llama_cpp["build_info"] = infos[0] if len(infos) == 1 else infos
    refs.dump(result, args.out)
    print(f"wrote {args.out}")


def run(bin_dir, extra, src, out, qtype, threads):
    """One llama-quantize run with `extra` arguments, described as the imatrix references are, plus the file's hash."""
    cmd = [str(bin_dir / "llama-quantize"), *extra, str(src), str(out), qtype, str(threads)]
    p = refs.run(cmd)
    refs.BUILD_INFO.append(refs.build_info(p.stderr))
    if p.returncode != 0 or not out.exists():
        tail = [l for l in (p.stderr + p.stdout).splitlines() if l.strip()][-3:]
        return {"llama_quantize_type": qtype, "args": extra, "error": f"exit {p.returncode}: " + " | ".join(tail)}
    d = refs.describe_gguf(out)
    reader = refs.GGUFReader(out)
    imatrix = {k: refs.kv_value(reader.fields[k]) for k in imq.IMATRIX_KEYS if k in reader.fields}
    return {
        "llama_quantize_type": qtype,
        "args": extra,
        "file_type": d["kv"].get("general.file_type"),
        "file_sha256": d["file_sha256"],
        "imatrix_kv": imatrix,
        "tensors": d["tensors"],
    }


if __name__ == "__main__":
    main()
