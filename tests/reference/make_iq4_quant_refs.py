#!/usr/bin/env python3
"""Record what `llama-quantize` writes for the i-quant presets, with and without an importance matrix, and
llama-perplexity on some of its files, for tgi's i-quant tests: `--family iq4` (IQ4_NL, IQ4_XS; perplexity of
IQ4_XS; tests/quantize_iq4.rs), `--family iq3` (IQ3_XXS, IQ3_S, IQ3_M; perplexity of IQ3_S;
tests/quantize_iq3.rs), `--family iq2` (IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M; no perplexity;
tests/quantize_iq2.rs) or `--family tq` (the ternary TQ1_0, TQ2_0, which ignore a matrix; perplexity of TQ2_0;
tests/quantize_tq.rs).

This is how tests/reference/llamacpp_iq4_quant.json, llamacpp_iq3_quant.json, llamacpp_iq2_quant.json and
llamacpp_tq_quant.json were made (see README.md there).
It runs an already-built llama.cpp; it never builds it.

    python3 tests/reference/make_iq4_quant_refs.py LLAMA_BIN_DIR [--family iq4|iq3|iq2|tq] [--models-dir DIR]

Runs, each recorded as make_imatrix_quant_refs.py records them (general.file_type, the quantize.imatrix.*
metadata, each tensor's type, shape and SHA-256, the whole file's SHA-256 and the input's):
  * stories-distill-4l: `llama-quantize [--imatrix MATRIX] DIR/stories-distill-4l/stories-distill-4l-f32.gguf OUT
    TYPE THREADS` for each type of the family, MATRIX the committed tests/reference/imatrix/stories-distill-4l.imatrix.gguf
    (a run llama-quantize refuses, such as IQ3_XXS without a matrix, is recorded with its error);
  * stories260k (64-wide rows, so IQ4_XS, IQ3_S and IQ3_XXS fall back to IQ4_NL): the committed
    models/stories260k/stories260k-f32.gguf, without a matrix.
Then `llama-perplexity -m OUT -f models/stories-distill-4l/text/heldout.txt -c 128 --chunks 32 -b 512 -t THREADS` on
stories-distill-4l's files of the family's perplexity type (the arguments of llamacpp_perplexity.json).

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
# family: (preset name: llama-quantize type, the type whose files get a perplexity, extra stories-distill-4l runs
# as (name suffix, type, arguments besides --imatrix), each with and without the matrix)
FAMILIES = {
    "iq4": ({"iq4_nl": "IQ4_NL", "iq4_xs": "IQ4_XS"}, "IQ4_XS", []),
    "iq3": (
        {"iq3_xxs": "IQ3_XXS", "iq3_s": "IQ3_S", "iq3_m": "IQ3_M"},
        "IQ3_S",
        [("iq3_s+ffn_up-iq3_xxs", "IQ3_S", ["--tensor-type", "ffn_up=iq3_xxs"])],
    ),
    "iq2": (
        {"iq2_xxs": "IQ2_XXS", "iq2_xs": "IQ2_XS", "iq2_s": "IQ2_S", "iq2_m": "IQ2_M", "iq1_s": "IQ1_S",
         "iq1_m": "IQ1_M"},
        None,
        [],
    ),
    "tq": ({"tq1_0": "TQ1_0", "tq2_0": "TQ2_0"}, "TQ2_0", []),
}


def main():
    root = Path(__file__).resolve().parent.parent.parent
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bin_dir", type=Path, help="directory with llama-quantize and llama-perplexity")
    ap.add_argument("--models-dir", type=Path, default=root / "models",
                    help="holds stories-distill-4l/stories-distill-4l-f32.gguf (default: the repository's models/)")
    ap.add_argument("--family", choices=FAMILIES, default="iq4")
    ap.add_argument("--out", type=Path, help="default: tests/reference/llamacpp_<family>_quant.json")
    ap.add_argument("--source", default=None, help="where the llama.cpp build came from, recorded as is")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/iq4-quant-refs"), help="scratch directory")
    args = ap.parse_args()
    types, ppl_type, extra_runs = FAMILIES[args.family]
    out_path = args.out or root / f"tests/reference/llamacpp_{args.family}_quant.json"

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
    for name, qtype in types.items():
        jobs.append((f"stories-distill-4l+{name}", "stories-distill-4l", distill, qtype, []))
        jobs.append((f"stories-distill-4l+{name}+imatrix", "stories-distill-4l", distill, qtype, ["--imatrix", MATRIX]))
        jobs.append((f"stories260k+{name}", "stories260k", stories, qtype, []))
    for suffix, qtype, extra in extra_runs:
        jobs.append((f"stories-distill-4l+{suffix}", "stories-distill-4l", distill, qtype, extra))
        jobs.append((f"stories-distill-4l+{suffix}+imatrix", "stories-distill-4l", distill, qtype, ["--imatrix", MATRIX, *extra]))
    for name, model, src, qtype, extra in jobs:
        out = args.work / f"{name.replace('+', '-')}.gguf"
        if out.exists():
            out.unlink()
        r = run(args.bin_dir, extra, src, out, qtype, args.threads)
        r["model"] = model
        r["input_sha256"] = refs.sha256_file(src)
        plain = name in (f"stories-distill-4l+{qtype.lower()}", f"stories-distill-4l+{qtype.lower()}+imatrix")
        if "error" not in r and plain and qtype == ppl_type:
            r["perplexity"] = refs.perplexity(args.bin_dir, out, text, args.threads)
        result["runs"][name] = r
        print(f"  {name:40} {r.get('error') or r.get('perplexity') or r['file_type']}", flush=True)
    infos = sorted({b for b in refs.BUILD_INFO if b})
    llama_cpp["build_info"] = infos[0] if len(infos) == 1 else infos
    refs.dump(result, out_path)
    print(f"wrote {out_path}")


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
