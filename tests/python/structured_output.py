"""Structured output against a running `tgi serve`: every JSON schema of a corpus, sampled at temperature 1,
must give output that parses and validates (jsonschema, formats checked where jsonschema can), or be refused
with a 422 naming the keyword the corpus says the engine cannot enforce; regular expressions and json_object
likewise; greedy constrained output is the same alone and in a batch of 16; the openai SDK's own structured
output helpers get valid objects.

Usage: structured_output.py URL CORPUS.json [--max-tokens N]
Prints one line of counts per kind and exits non-zero on the first violation. An output cut by the token limit
(`finish_reason: length`) cannot be checked and is counted apart (a tiny story model at temperature 1 may write
free keys and strings until the limit; numbers the server bounds); more than a quarter of them fails the run.
"""

import argparse
import copy
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import requests
from huggingface_hub import InferenceClient
from openai import OpenAI

REGEXES = [
    r"(yes|no)",
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}",
    r"\(?[0-9]{3}\)? [0-9]{3}-[0-9]{4}",
    r"[a-z]{2,8}@[a-z]{2,8}\.(com|org|net)",
    r"(red|green|blue)(, (red|green|blue)){0,3}",
    r"The (cat|dog|bird) is (happy|sad)\.",
    r"[A-Z][a-z]{1,9} [A-Z][a-z]{1,9}",
    r"#[0-9a-f]{6}",
    r"-?[0-9]{1,5}(\.[0-9]{1,3})?",
    r"[01]{8}",
    r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [0-9]{1,2}:[0-9]{2}",
    r"v[0-9]\.[0-9]{1,2}\.[0-9]{1,2}",
    r"[a-z]+( [a-z]+){0,5}\.",
    r"\[([0-9]{1,2}(, [0-9]{1,2}){0,4})?\]",
    r"(once|twice|three times)",
    r"[A-Z]{3}-[0-9]{4}",
    r"https://[a-z]{3,10}\.(com|org)/[a-z]{0,10}",
    r"(\+|-)[0-9]{1,3}",
    r"[a-z]{3}(_[a-z]{3}){1,2}",
    r"(north|south|east|west)",
]


def rfc3339(v):
    """An RFC 3339 date or time as Python's checkers read it: RFC 3339 allows lower-case `t` and `z` (section
    5.6) and the year 0000, which they refuse (2000 keeps February 29 valid)."""
    v = v.upper()
    return "2000" + v[4:] if v.startswith("0000") else v


def format_checker():
    """Draft 2020-12's format checker, reading dates and times as RFC 3339 defines them (see `rfc3339`)."""
    checker = copy.deepcopy(jsonschema.Draft202012Validator.FORMAT_CHECKER)
    for name in ("date-time", "date", "time"):
        strict, raises = checker.checkers[name]
        checker.checks(name, raises=raises)(lambda v, strict=strict: not isinstance(v, str) or strict(rfc3339(v)))
    return checker


def fail(msg):
    sys.exit(f"FAIL: {msg}")


class Server:
    def __init__(self, url, max_tokens):
        self.url = url
        self.max_tokens = max_tokens
        self.session = requests.Session()

    def generate(self, grammar, seed=None, prompt="Once upon a time"):
        params = {"max_new_tokens": self.max_tokens, "grammar": grammar, "details": True}
        if seed is not None:
            params |= {"do_sample": True, "temperature": 1.0, "seed": seed}
        r = requests.post(f"{self.url}/generate", json={"inputs": prompt, "parameters": params}, timeout=600)
        body = r.json()
        if r.status_code != 200:
            return r.status_code, body.get("error", ""), None
        return 200, body["generated_text"], body["details"]["finish_reason"]


def check_schemas(server, corpus):
    counts = {"valid": 0, "truncated": 0, "refused": 0}
    checker = format_checker()

    def one(i, entry):
        return entry, server.generate({"type": "json", "value": entry["schema"]}, seed=i)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda a: one(*a), enumerate(corpus)))
    for entry, (status, text, finish) in results:
        name = entry["name"]
        if "refuse" in entry:
            if status != 422 or entry["refuse"] not in text:
                fail(f"schema {name}: expected a 422 naming {entry['refuse']}, got {status}: {text!r}")
            counts["refused"] += 1
            continue
        if status != 200:
            fail(f"schema {name}: {status} {text}")
        if finish == "length":
            counts["truncated"] += 1
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            fail(f"schema {name}: output does not parse ({e}): {text!r}")
        try:
            jsonschema.validate(value, entry["schema"], format_checker=checker)
        except jsonschema.ValidationError as e:
            fail(f"schema {name}: output {text!r} does not validate: {e.message}")
        counts["valid"] += 1
    checked = counts["valid"] + counts["truncated"]
    print(f"json_schema: {len(corpus)} schemas, {counts['valid']} valid, {counts['truncated']} cut by the token "
          f"limit, {counts['refused']} refused with the unsupported keyword named, 0 invalid")
    if counts["truncated"] * 4 > checked:
        fail(f"more than a quarter of the outputs were cut by the token limit: {counts}")
    return counts


def check_regexes(server):
    valid = truncated = 0
    for i, rx in enumerate(REGEXES * 3):
        status, text, finish = server.generate({"type": "regex", "value": rx}, seed=i)
        if status != 200:
            fail(f"regex {rx}: {status} {text}")
        if finish == "length":
            truncated += 1
        elif not re.fullmatch(rx, text):
            fail(f"regex {rx}: {text!r} does not match")
        else:
            valid += 1
    print(f"regex: {len(REGEXES) * 3} outputs, {valid} match, {truncated} cut by the token limit, 0 invalid")
    if truncated * 4 > valid + truncated:
        fail("more than a quarter of the regex outputs were cut by the token limit")


def check_json_object(server, client, model):
    valid = truncated = 0
    for i in range(20):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": f"Describe pet number {i} as JSON."}],
            response_format={"type": "json_object"}, temperature=1.0, seed=i, max_tokens=server.max_tokens,
        )
        choice = r.choices[0]
        if choice.finish_reason == "length":
            truncated += 1
            continue
        if not isinstance(json.loads(choice.message.content), dict):
            fail(f"json_object: {choice.message.content!r} is not an object")
        valid += 1
    print(f"json_object: 20 outputs, {valid} objects, {truncated} cut by the token limit, 0 invalid")


def check_batch_identity(server, corpus):
    schemas = [e for e in corpus if "refuse" not in e][:16]
    grammars = [{"type": "json", "value": e["schema"]} for e in schemas]
    alone = [server.generate(g) for g in grammars]
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(server.generate, grammars))
    for e, a, t in zip(schemas, alone, together):
        if a != t:
            fail(f"greedy output under {e['name']} alone {a!r} differs in a batch of 16: {t!r}")
    print("greedy constrained outputs: 16 identical alone and in a batch of 16")


def check_sdk(server, client, model, corpus):
    entry = next(e for e in corpus if e["name"] == "weather_report")
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "The weather?"}], temperature=1.0, seed=3,
        max_tokens=server.max_tokens,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "weather", "schema": entry["schema"], "strict": True}},
    )
    if r.choices[0].finish_reason != "length":
        jsonschema.validate(json.loads(r.choices[0].message.content), entry["schema"])
    stream = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "The weather?"}], temperature=1.0, seed=3,
        max_tokens=server.max_tokens, stream=True,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "weather", "schema": entry["schema"], "strict": True}},
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    if streamed != r.choices[0].message.content:
        fail(f"streamed {streamed!r} differs from {r.choices[0].message.content!r} for the same seed")
    print("openai SDK: json_schema response_format, streamed and not, valid and equal")


def check_hub(server, corpus):
    """huggingface_hub's InferenceClient: text_generation with TGI's grammar, streamed and not."""
    entry = next(e for e in corpus if e["name"] == "person")
    hub = InferenceClient(server.url)
    for i in range(5):
        out = hub.text_generation("Once upon a time", max_new_tokens=server.max_tokens, details=True, seed=i,
                                  do_sample=True, temperature=1.0, grammar={"type": "json", "value": entry["schema"]})
        if out.details.finish_reason != "length":
            jsonschema.validate(json.loads(out.generated_text), entry["schema"])
    regex = {"type": "regex", "value": REGEXES[1]}
    streamed = "".join(t.token.text for t in hub.text_generation("Once", max_new_tokens=20, stream=True, details=True,
                                                                 grammar=regex) if not t.token.special)
    if not re.fullmatch(REGEXES[1], streamed):
        fail(f"huggingface_hub stream under {REGEXES[1]}: {streamed!r}")
    print("huggingface_hub: text_generation with a json and a regex grammar, streamed and not, valid")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("corpus")
    ap.add_argument("--max-tokens", type=int, default=300)
    a = ap.parse_args()
    corpus = json.load(open(a.corpus))
    server = Server(a.url, a.max_tokens)
    client = OpenAI(base_url=a.url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    check_schemas(server, corpus)
    check_regexes(server)
    check_json_object(server, client, model)
    check_batch_identity(server, corpus)
    check_sdk(server, client, model, corpus)
    check_hub(server, corpus)
    print("all structured output checks passed")


if __name__ == "__main__":
    main()
