"""Grammars that always end, against a running `tgi serve`: seeded random JSON schemas of number, integer,
string, boolean and array properties, sampled at temperature 1 with a token limit. Strings and arrays carry their
own bounds; numbers are left unbounded, for the server's default digit bounds (15 integer, 10 fractional digits)
to end them. Every schema's longest valid output, laid out as the server lays out JSON, is shorter in bytes than
the token limit (a token is at least a byte), so an output cut by the limit means a grammar that let the model go
on: none may be cut, and every output must validate (jsonschema) against the schema as sent.

Usage: bounded_output.py URL [--count 200] [--max-tokens 256] [--seed 0]
"""

import argparse
import json
import random
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import requests

# Longest texts of the server's default bounds: sign, 15 integer digits, point, 10 fractional digits.
NUMBER_BYTES = 1 + 15 + 1 + 10
INTEGER_BYTES = 1 + 15
# A string character may be written as a surrogate pair of \u escapes.
BYTES_PER_CHAR = 12


def scalar(rng):
    """A scalar schema and the bytes of its longest valid output."""
    kind = rng.choice(["number", "number", "integer", "string", "boolean"])
    if kind == "number":
        schema = {"type": "number"}
        if rng.random() < 0.3:
            schema["minimum"] = rng.choice([0, -10, 1.5])
        if rng.random() < 0.2:
            schema["multipleOf"] = 0.25
        return schema, NUMBER_BYTES
    if kind == "integer":
        schema = {"type": "integer"}
        if rng.random() < 0.3:
            schema["maximum"] = rng.choice([0, 100, 5000])
        return schema, INTEGER_BYTES
    if kind == "string":
        n = rng.randint(1, 6)
        return {"type": "string", "maxLength": n}, 2 + BYTES_PER_CHAR * n
    return {"type": "boolean"}, 5


def value(rng):
    if rng.random() < 0.3:
        item, longest = scalar(rng)
        n = rng.randint(1, 3)
        return {"type": "array", "items": item, "maxItems": n}, 2 + n * longest + 2 * (n - 1)
    return scalar(rng)


def schema(rng, budget):
    """A random object schema whose longest output fits in `budget` bytes, and that length."""
    while True:
        props, longest, required = {}, 2, []
        for i in range(rng.randint(1, 4)):
            name = "abcdefgh"[i]
            props[name], n = value(rng)
            longest += len(f'"{name}": ') + n + (2 if i else 0)
            if rng.random() < 0.6:
                required.append(name)
        if longest <= budget:
            return {"type": "object", "properties": props, "required": required, "additionalProperties": False}, longest


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    # The grammar's end leaves one token for end-of-sequence.
    schemas = [schema(rng, a.max_tokens - 2) for _ in range(a.count)]
    with_numbers = sum('"number"' in json.dumps(s) for s, _ in schemas)

    def one(i):
        s, _ = schemas[i]
        params = {"max_new_tokens": a.max_tokens, "do_sample": True, "temperature": 1.0, "seed": i, "details": True,
                  "grammar": {"type": "json", "value": s}}
        r = requests.post(f"{a.url}/generate", json={"inputs": "Once upon a time", "parameters": params}, timeout=600)
        return r.status_code, r.json()

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(a.count)))
    cut = 0
    for i, ((s, longest), (status, body)) in enumerate(zip(schemas, results)):
        if status != 200:
            sys.exit(f"FAIL: schema {i} {json.dumps(s)}: {status} {body}")
        text, finish = body["generated_text"], body["details"]["finish_reason"]
        if finish == "length":
            cut += 1
            print(f"cut by the token limit: schema {i} {json.dumps(s)} (longest {longest} bytes): {text!r}")
            continue
        try:
            jsonschema.validate(json.loads(text), s)
        except (json.JSONDecodeError, jsonschema.ValidationError) as e:
            sys.exit(f"FAIL: schema {i} {json.dumps(s)}: {text!r} is invalid: {e}")
    print(f"{a.count} random schemas ({with_numbers} with numbers) at temperature 1, max_tokens {a.max_tokens}: "
          f"{cut} cut by the token limit, 0 invalid")
    if cut:
        sys.exit(f"FAIL: {cut} outputs were cut by the token limit")
    print("every output ended and validated")


if __name__ == "__main__":
    main()
