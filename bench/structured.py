#!/usr/bin/env python3
"""Structured-output overhead: decode throughput of `tgi serve` under a JSON schema against unconstrained
decoding, in the same run on the same server, and the first-token latency a schema's compilation adds, with and
without the compiled-grammar cache.

Throughput: CONCURRENCY clients each send REQUESTS greedy /generate requests of MAX_NEW tokens back to back,
unconstrained or under a schema the output cannot finish within MAX_NEW tokens (an array of at least 10,000
integers), so both run to the token limit; the configurations alternate REPEATS times and the table gives the
median tokens/s of wall time and the median ratio. Compilation: time to the first streamed token of one request
under a schema never seen (its description made unique), and under the same schema again (a cache hit), against
an unconstrained request; medians of SAMPLES.

Usage: bench/structured.py [--tgi BIN] [--model PATH] [--concurrency 1,16] [--requests 2] [--max-new 64]
                           [--repeats 3] [--samples 5] [--json OUT]
Standard library only.
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from speculative import ROOT, post, run_clients, start  # noqa: E402

PROMPTS = ["Once upon a time", "The numbers were", "Tom counted", "One day, a girl named Sue"]


def schema(tag=""):
    """A realistic object schema for the compile check; `tag` makes it a schema never seen before."""
    return {
        "type": "object",
        "description": f"order {tag}",
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 99999},
            "customer": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                                          "email": {"type": "string", "format": "email"}},
                         "required": ["name", "email"]},
            "items": {"type": "array", "minItems": 1, "maxItems": 5, "items": {
                "type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
                                                 "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
                "required": ["sku", "qty"]}},
            "status": {"enum": ["pending", "paid", "shipped", "cancelled"]},
        },
        "required": ["id", "customer", "items", "status"],
    }


ENDLESS = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 10000}


def throughput(url, grammar, concurrency, requests, max_new):
    lock = threading.Lock()
    tokens = [0]

    def client(c):
        for i in range(requests):
            params = {"max_new_tokens": max_new, "details": True}
            if grammar is not None:
                params["grammar"] = grammar
            r = post(url + "/generate", {"inputs": PROMPTS[(c + i) % len(PROMPTS)], "parameters": params})
            with lock:
                tokens[0] += r["details"]["generated_tokens"]

    wall = run_clients(concurrency, client)
    return tokens[0] / wall


def first_token(url, grammar):
    """Seconds from sending a streamed request to its first token event."""
    params = {"max_new_tokens": 2}
    if grammar is not None:
        params["grammar"] = grammar
    body = json.dumps({"inputs": "Once upon a time", "parameters": params}).encode()
    req = urllib.request.Request(url + "/generate_stream", body, {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data:"):
                return time.perf_counter() - t0
    sys.exit("no token event")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tgi", default=os.path.join(ROOT, "target/release/tgi"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/stories260k/stories260k-f32.gguf"))
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--requests", type=int, default=2)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args()
    server, url = start(a.tgi, a.model, [])
    endless = {"type": "json", "value": ENDLESS}
    try:
        first_token(url, endless)  # builds the vocabulary's trie once, outside the measurements
        rows = []
        for c in [int(x) for x in a.concurrency.split(",")]:
            free, constrained, ratios = [], [], []
            for _ in range(a.repeats):
                f = throughput(url, None, c, a.requests, a.max_new)
                s = throughput(url, endless, c, a.requests, a.max_new)
                free.append(f)
                constrained.append(s)
                ratios.append(s / f)
            rows.append({"concurrency": c, "free_tok_s": statistics.median(free),
                         "schema_tok_s": statistics.median(constrained), "ratio": statistics.median(ratios)})
        plain = statistics.median(first_token(url, None) for _ in range(a.samples))
        fresh = statistics.median(
            first_token(url, {"type": "json", "value": schema(f"{time.time_ns()}-{i}")}) for i in range(a.samples))
        cached_schema = {"type": "json", "value": schema("cached")}
        first_token(url, cached_schema)
        cached = statistics.median(first_token(url, cached_schema) for _ in range(a.samples))
    finally:
        server.terminate()
        server.wait()
    print(f"model: {a.model}; {a.max_new} new tokens per request, {a.requests} requests per client")
    print("| concurrency | unconstrained tok/s | JSON schema tok/s | ratio |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['concurrency']} | {r['free_tok_s']:.1f} | {r['schema_tok_s']:.1f} | {r['ratio']:.3f} |")
    print(f"time to first token: unconstrained {plain * 1e3:.1f} ms, new schema {fresh * 1e3:.1f} ms "
          f"(+{(fresh - plain) * 1e3:.1f}), cached schema {cached * 1e3:.1f} ms (+{(cached - plain) * 1e3:.1f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"throughput": rows, "ttft_s": {"free": plain, "new_schema": fresh, "cached_schema": cached}}, f)


if __name__ == "__main__":
    main()
