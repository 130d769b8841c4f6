"""Embeddings with the openai SDK against a running `tgi serve` of the bundled stories260k model (mean pooling):
`client.embeddings.create` asks for base64 by default and decodes it; float on request; base64 named (which the SDK
leaves encoded); all must give the
transformers reference vectors (tests/reference/embeddings/) at unit length, within 1e-4 of the largest component;
`dimensions` other than the model's size is refused.

Usage: serve_embeddings.py URL REFERENCE_JSON
Exits non-zero with a message on the first failed check.
"""

import base64
import json
import math
import struct
import sys

import openai
from openai import OpenAI


def unit(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def close(what, got, want):
    scale = max(abs(x) for x in want)
    err = max(abs(a - b) for a, b in zip(got, want))
    if len(got) != len(want) or err > 1e-4 * scale:
        sys.exit(f"{what}: {len(got)} values, max |diff| {err} over a largest component of {scale}")
    print(f"ok {what}: max |diff| {err:.2e}")


def main():
    url, path = sys.argv[1], sys.argv[2]
    ref = json.load(open(path))["models"]["stories260k"]["inputs"]
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    texts = [r["input"] for r in ref]
    for fmt in [None, "float", "base64"]:
        args = {} if fmt is None else {"encoding_format": fmt}
        out = client.embeddings.create(model="stories260k", input=texts, **args)
        for r, d in zip(ref, out.data):
            # Asked for by name, base64 comes back as the server sent it: little-endian f32s.
            got = d.embedding if fmt != "base64" else struct.unpack(f"<{len(r['mean'])}f", base64.b64decode(d.embedding))
            close(f"{fmt or 'default'} {r['input']!r}", list(got), unit(r["mean"]))
        if out.usage.prompt_tokens != sum(len(r["ids"]) for r in ref):
            sys.exit(f"usage: {out.usage}")
    one = client.embeddings.create(model="stories260k", input=ref[0]["ids"], dimensions=64)
    close("token ids, dimensions 64", list(one.data[0].embedding), unit(ref[0]["mean"]))
    try:
        client.embeddings.create(model="stories260k", input="Hi", dimensions=8)
        sys.exit("dimensions 8 was accepted")
    except openai.APIStatusError as e:
        if e.status_code != 422 or "dimensions" not in str(e):
            sys.exit(f"dimensions 8: {e}")
        print("ok dimensions 8 refused")
    print("all embedding checks passed")


main()
