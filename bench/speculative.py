#!/usr/bin/env python3
"""Speculative decoding benchmark: `tgi serve` with speculation off and with each method (n-gram, a draft model,
the draft model proposing among the first --draft-vocab token ids (`draft-short`), Medusa heads; adaptive, or
`-fixed` at --depth), on prompt sets: `copy-heavy` (the answer repeats or edits the prompt), `story` (short story
starts), `heldout` (the first two sentences of stories of the held-out TinyStories text) and `code` (starts of
functions and programs), at several concurrencies and temperatures.

Starts one server per configuration (they idle while another is measured), then for each prompt set and
concurrency measures the configurations back to back, REPEATS times in rotating order (other work on the
machine then hits all of them alike), and reports the median decode throughput (generated tokens per second of
wall time over all clients, /generate requests of MAX_NEW tokens, greedy or sampled with a seed per request), the
median over repeats of its ratio to speculation off measured in the same repeat, the acceptance (accepted /
drafted tokens, from each response's `details`), and the speed-up the engine's adaptive rule predicted
(`tgi_speculation_predicted_speedup` from /metrics after the run, with the measured token cost
`tgi_speculation_token_cost`), and the share of the run's decode steps in which the check of what drafting
yields held drafting off (`tgi_speculation_held_steps` over the decode steps).

Per draft position i (1 = the first drafted token) it also reports the acceptance at that position: the share of
the drafts reaching position i whose first i tokens were all accepted (the `tgi_*_by_position` counters of
/metrics, their change over the measured requests; the sum over positions is the drafted tokens accepted per
verification at full depth).

With --llamacpp DIR (a llama.cpp build's bin folder) and a draft model, llama.cpp runs the same pair on the same
prompts at concurrency 1 and every temperature asked for (sampled with plain temperature: no top-k, top-p or min-p,
as tgi's requests): `llama-speculative-simple -m MODEL -md DRAFT` (speed-up against `llama-server` without a draft,
on the same requests: generated tokens over prompt + decode time for both) and `llama-server -md DRAFT`, reported
beside ours as configurations `llama-off`, `llama-spec-simple` and `llama-server-md`.

Usage: bench/speculative.py [--tgi BIN] [--model PATH] [--concurrency 1,4,16] [--requests 8] [--max-new 128]
                            [--repeats 3] [--configs off,ngram,ngram-fixed] [--draft-model PATH]
                            [--draft-quantize TYPE] [--draft-vocab N] [--depth 4] [--medusa DIR]
                            [--temperatures 0,0.7] [--prompt-sets copy-heavy,story,heldout,code]
                            [--extra 'FLAGS'] [--threads N] [--llamacpp DIR] [--json OUT]
Standard library only.
"""

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

STORY = [
    "Once upon a time",
    "One day, a girl named Sue went to the store with her mom",
    "The sun was shining and the birds were singing",
    "Tom and his friend",
    "In a big forest there lived a bear",
    "Lily wanted to fly a kite",
    "There was a small boat on the lake",
    "Max found a shiny stone in the garden",
]

CODE = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "#include <stdio.h>\n\nint main(void) {\n",
    "function quickSort(arr) {\n",
    "class Stack:\n    def __init__(self):\n",
    "import numpy as np\n\ndef normalize(x):\n",
    "fn main() {\n    let numbers: Vec<i32> = ",
    "public class HelloWorld {\n    public static void main(String[] args) {\n",
    "SELECT customers.name, COUNT(orders.id)\nFROM customers\n",
]

HELDOUT = os.path.join(ROOT, "models/stories-distill-4l/text/heldout.txt")


def heldout_prompts(n=8):
    """The first two sentences of the first `n` stories of the held-out TinyStories text that start with "Once
    upon a time"."""
    out = []
    with open(HELDOUT) as f:
        for line in f:
            if line.startswith("Once upon a time"):
                out.append(". ".join(line.split(". ")[:2]) + ".")
                if len(out) == n:
                    break
    return out


def copy_prompts(url, n_tokens):
    """Copy-heavy prompts: a story start, the model's own greedy continuation, a blank line and the start again,
    so that the answer repeats a passage of the prompt (as when a model rewrites a document it was given)."""
    out = []
    for start in STORY:
        r = post(url + "/generate", {"inputs": start, "parameters": {"max_new_tokens": n_tokens}})
        out.append(start + r["generated_text"] + "\n\n" + start)
    return out


def configs(a):
    """Each configuration's `tgi serve` flags (the draft and Medusa ones only when their files are given)."""
    depth = ["--speculate", str(a.depth)]
    out = {"off": [], "ngram": depth + ["--speculate-type", "ngram"]}
    if a.draft_model:
        out["draft"] = depth + ["--draft-model", a.draft_model]
        if a.draft_quantize:
            out["draft"] += ["--draft-quantize", a.draft_quantize]
        if a.draft_vocab:
            out["draft-short"] = out["draft"] + ["--draft-vocab", str(a.draft_vocab)]
    if a.medusa:
        out["medusa"] = depth + ["--medusa", a.medusa]
    for name in [n for n in out if n != "off"]:
        out[name + "-fixed"] = out[name] + ["--speculate-fixed"]
    return out


def scrape(url):
    """The server's /metrics samples, by their name with labels."""
    out = {}
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
    return out


HELD = "tgi_speculation_held_steps"
DECODE_STEPS = 'tgi_batch_inference_count{method="decode"}'


def by_position(metrics, prefix):
    """The per-position counter `prefix` as a list (position 1 first)."""
    pat = re.compile(re.escape(prefix) + r'\{position="(\d+)"\}')
    found = {int(m.group(1)): v for k, v in metrics.items() if (m := pat.fullmatch(k))}
    return [found.get(i, 0.0) for i in range(1, max(found, default=0) + 1)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def start(cmd, env=None):
    """Starts a server `cmd` (its port is appended, `env` its environment) and waits until /health answers."""
    port = free_port()
    cmd = cmd + ["--port", str(port)]
    # The log goes to a file: an unread pipe fills up and blocks the server once it has logged 64 KiB.
    log = tempfile.TemporaryFile("w+")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return p, url
        except Exception:
            if p.poll() is not None:
                log.seek(0)
                sys.exit(f"server {cmd} exited: {log.read()}")
            time.sleep(0.1)
    sys.exit(f"server {cmd} did not start")


def parameters(max_new, temperature, seed):
    """A /generate request's parameters: greedy at temperature 0, else sampled with a seed."""
    out = {"max_new_tokens": max_new, "details": True}
    if temperature > 0:
        out.update({"do_sample": True, "temperature": temperature, "seed": seed})
    return out


def measure(url, prompts, concurrency, requests, max_new, temperature):
    """Each of `concurrency` clients sends `requests` requests back to back; returns tokens/s over the wall
    time, drafted and accepted tokens, the drafted and accepted tokens by position and the decode steps the
    check of what drafting yields held drafting off and in all (from /metrics), and the answer to each prompt."""
    lock = threading.Lock()
    totals = {"tokens": 0, "drafted": 0, "accepted": 0, "texts": {}}

    def client(c):
        for i in range(requests):
            n = c * requests + i
            prompt = prompts[n % len(prompts)]
            r = post(url + "/generate", {"inputs": prompt, "parameters": parameters(max_new, temperature, n + 1)})
            d = r["details"]
            with lock:
                totals["texts"][prompt] = r["generated_text"]
                totals["tokens"] += d["generated_tokens"]
                totals["drafted"] += d.get("speculated_tokens", 0)
                totals["accepted"] += d.get("accepted_tokens", 0)

    before = scrape(url)
    wall = run_clients(concurrency, client)
    after = scrape(url)
    positions = [
        [x - y for x, y in zip(by_position(after, name), by_position(before, name) + [0.0] * 64)]
        for name in ["tgi_speculated_tokens_by_position", "tgi_speculative_accepted_tokens_by_position"]
    ]
    held = [after.get(k, 0.0) - before.get(k, 0.0) for k in [HELD, DECODE_STEPS]]
    return totals["tokens"] / wall, totals["drafted"], totals["accepted"], positions, held, totals["texts"]


def run_clients(concurrency, client):
    """Runs `client(c)` for c in 0..concurrency on as many threads at once; returns the wall time in seconds."""
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


class LlamaCpp:
    """llama.cpp on the same pair, one sequence at a time: `llama-server` without a draft (the baseline),
    `llama-server -md DRAFT`, and `llama-speculative-simple`."""

    NAMES = ["llama-off", "llama-spec-simple", "llama-server-md"]

    def __init__(self, a):
        self.a = a
        self.env = dict(os.environ, LD_LIBRARY_PATH=a.llamacpp)
        common = ["-m", a.model, "-t", str(a.threads), "-c", "4096"]
        self.common = common
        self.draft = [
            "-md", a.draft_model, "-td", str(a.threads), "--spec-type", "draft-simple",
            "--spec-draft-n-max", str(a.depth),
        ]
        server = [os.path.join(a.llamacpp, "llama-server"), "--host", "127.0.0.1", "-np", "1"] + common
        self.servers = {}
        for name, extra in [("llama-off", []), ("llama-server-md", self.draft)]:
            self.servers[name] = start(server + extra, self.env)

    def measure(self, name, prompts, requests, max_new, temp):
        """Generated tokens over prompt + decode seconds of `requests` prompts run one after another, and the
        drafted and accepted tokens."""
        tokens, secs, drafted, accepted = 0, 0.0, 0, 0
        for i in range(requests):
            prompt = prompts[i % len(prompts)]
            if name == "llama-spec-simple":
                n, s, d, acc = self.spec_simple(prompt, max_new, temp, i + 1)
            else:
                body = {"prompt": prompt, "n_predict": max_new, "cache_prompt": False, "seed": i + 1,
                        **llama_sampling(temp)}
                t = post(self.servers[name][1] + "/completion", body)["timings"]
                n, s = t["predicted_n"], (t["prompt_ms"] + t["predicted_ms"]) / 1000
                d, acc = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
            tokens, secs, drafted, accepted = tokens + n, secs + s, drafted + d, accepted + acc
        return tokens / secs, drafted, accepted

    def spec_simple(self, prompt, max_new, temp, seed):
        """One run of llama-speculative-simple: tokens decoded, prompt + decode seconds, drafted, accepted."""
        cmd = [os.path.join(self.a.llamacpp, "llama-speculative-simple")] + self.common + self.draft
        cmd += ["-n", str(max_new), "-p", prompt, "--seed", str(seed)]
        for k, v in llama_sampling(temp).items():
            cmd += ["--temp" if k == "temperature" else "--" + k.replace("_", "-"), str(v)]
        out = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=600)
        log = out.stdout + out.stderr
        enc = re.search(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds", log)
        dec = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
        drafted = re.search(r"n_drafted\s*=\s*(\d+)", log)
        accepted = re.search(r"n_accept\s*=\s*(\d+)", log)
        if out.returncode != 0 or not (enc and dec and drafted and accepted):
            sys.exit(f"{cmd} failed ({out.returncode}): {log[-3000:]}")
        secs = float(enc.group(1)) + float(dec.group(2))
        return int(dec.group(1)), secs, int(drafted.group(1)), int(accepted.group(1))

    def close(self):
        stop(self.servers.values())


def stop(servers):
    for p, _ in servers:
        p.terminate()
        p.wait()


def prompt_sets(a, url):
    """The prompt sets asked for, by name."""
    out = {}
    for name in a.prompt_sets.split(","):
        if name == "copy-heavy":
            out[name] = copy_prompts(url, a.max_new + 32)
        elif name == "story":
            out[name] = STORY
        elif name == "heldout":
            out[name] = heldout_prompts()
        elif name == "code":
            out[name] = CODE
        else:
            sys.exit(f"unknown prompt set {name} (copy-heavy, story, heldout, code)")
    return out


def row(set_name, conc, temp, n, runs, base, drafted, accepted, positions, tokens, extra=None):
    """One result row; `base` are the baseline's runs of the same repeats."""
    ratios = [x / y for x, y in zip(runs, base)]
    d, acc = positions
    r = {
        "prompts": set_name, "concurrency": conc, "temperature": temp, "config": n,
        "tok_s": round(statistics.median(runs), 1),
        "ratio": round(statistics.median(ratios), 3),
        "runs": [round(x, 1) for x in runs],
        "acceptance": round(accepted / drafted, 3) if drafted else None,
        "accepted_per_token": round(accepted / tokens, 3),
        "by_position": [round(y / x, 3) if x else None for x, y in zip(d, acc)],
        "drafted_by_position": [int(x) for x in d],
    }
    r.update(extra or {})
    print(json.dumps(r), file=sys.stderr, flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tgi", default=os.path.join(ROOT, "target/release/tgi"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/stories260k/stories260k-f32.gguf"))
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=8, help="requests per client")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", default="off,ngram,ngram-fixed")
    ap.add_argument("--depth", type=int, default=4, help="most tokens drafted per step (--speculate)")
    ap.add_argument("--draft-model", help="a draft model for the draft configurations")
    ap.add_argument("--draft-quantize", help="quantize the draft model at load (--draft-quantize TYPE)")
    ap.add_argument("--draft-vocab", type=int, help="adds draft-short: the draft proposes among the first N ids")
    ap.add_argument("--medusa", help="a Medusa directory for the medusa configurations")
    ap.add_argument("--temperatures", default="0", help="0 = greedy; else sampled with a seed per request")
    ap.add_argument("--prompt-sets", default="copy-heavy,story")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of every server (tgi and llama.cpp)")
    ap.add_argument("--extra", default="", help="more `tgi serve` flags for every server")
    ap.add_argument("--llamacpp", help="llama.cpp's bin folder: run the same pair there too (needs --draft-model)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    names = a.configs.split(",")
    known = configs(a)
    missing = [n for n in names if n not in known]
    if missing:
        sys.exit(f"unknown configurations {missing} (draft and medusa need --draft-model / --medusa): {list(known)}")
    if a.llamacpp and not a.draft_model:
        sys.exit("--llamacpp runs the draft pair: it needs --draft-model")
    serve = [a.tgi, "serve", "-m", a.model, "--max-concurrent-requests", "64", "--threads", str(a.threads)]
    servers = {n: start(serve + known[n] + a.extra.split()) for n in names}
    llama = None
    rows = []
    mismatches = []
    try:
        llama = LlamaCpp(a) if a.llamacpp else None
        sets = prompt_sets(a, servers[names[0]][1])
        temps = [float(t) for t in a.temperatures.split(",")]
        for (set_name, prompts), temp in [(s, t) for s in sets.items() for t in temps]:
            for conc in [int(c) for c in a.concurrency.split(",")]:
                for n in names:  # warm-up
                    measure(servers[n][1], prompts, conc, 1, 16, temp)
                runs = {n: [] for n in names}
                drafted = {n: 0 for n in names}
                accepted = {n: 0 for n in names}
                positions = {n: [[0.0] * 64, [0.0] * 64] for n in names}
                answers = {}
                predicted = {n: [] for n in names}
                held = {n: [0.0, 0.0] for n in names}
                cost = {n: [] for n in names}
                for r in range(a.repeats):
                    order = names[r % len(names):] + names[: r % len(names)]
                    for n in order:
                        url = servers[n][1]
                        tps, d, acc, pos, h, texts = measure(url, prompts, conc, a.requests, a.max_new, temp)
                        held[n] = [x + y for x, y in zip(held[n], h)]
                        if temp == 0:
                            # Greedy output must not depend on speculation: each answer is off's.
                            differ = [p for p in texts if texts[p] != answers.setdefault(p, texts[p])]
                            if differ:
                                print(f"GREEDY MISMATCH: {n} on {differ}", file=sys.stderr, flush=True)
                                mismatches.append((n, set_name, conc))
                        runs[n].append(tps)
                        drafted[n] += d
                        accepted[n] += acc
                        for total, got in zip(positions[n], pos):
                            for i, x in enumerate(got):
                                total[i] += x
                        if n != "off":
                            m = scrape(url)
                            predicted[n].append(m.get("tgi_speculation_predicted_speedup"))
                            cost[n].append(m.get("tgi_speculation_token_cost"))
                tokens = a.repeats * conc * a.requests * a.max_new
                for n in names:
                    used = [p[: a.depth] for p in positions[n]]
                    extra = {
                        "predicted": round(statistics.median(predicted[n]), 3) if predicted[n] else None,
                        "token_cost": round(statistics.median(cost[n]), 3) if cost[n] else None,
                        "held": round(held[n][0] / held[n][1], 3) if held[n][1] and n != "off" else None,
                    }
                    rows.append(row(set_name, conc, temp, n, runs[n], runs[names[0]], drafted[n], accepted[n],
                                    used, tokens, extra))
                if llama and conc == 1:
                    rows += llama_rows(llama, a, set_name, prompts, temp)
    finally:
        stop(servers.values())
        if llama:
            llama.close()
    report(rows, a.depth)
    same = "no: " + str(mismatches) if mismatches else "yes"
    print(f"\ngreedy answers identical to the first configuration's: {same}")
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, a.json)


def llama_sampling(temp):
    """llama.cpp's sampling parameters for tgi's requests at `temp`: greedy at 0, else plain temperature."""
    if temp == 0:
        return {"temperature": 0, "top_k": 1}
    return {"temperature": temp, "top_k": 0, "top_p": 1.0, "min_p": 0.0}


def llama_rows(llama, a, set_name, prompts, temp):
    """llama.cpp's configurations on one prompt set at one temperature, `a.repeats` times in rotating order."""
    llama.measure("llama-off", prompts, 1, 16, temp)  # warm-up
    runs = {n: [] for n in LlamaCpp.NAMES}
    drafted = {n: 0 for n in LlamaCpp.NAMES}
    accepted = {n: 0 for n in LlamaCpp.NAMES}
    for r in range(a.repeats):
        names = LlamaCpp.NAMES
        for n in names[r % len(names):] + names[: r % len(names)]:
            tps, d, acc = llama.measure(n, prompts, a.requests, a.max_new, temp)
            runs[n].append(tps)
            drafted[n] += d
            accepted[n] += acc
    tokens = a.repeats * a.requests * a.max_new
    none = [[], []]
    return [row(set_name, 1, temp, n, runs[n], runs["llama-off"], drafted[n], accepted[n], none, tokens)
            for n in LlamaCpp.NAMES]


def report(rows, depth):
    """The results as two Markdown tables: throughput, and acceptance by draft position."""
    print("| prompts | concurrency | temperature | config | decode tok/s (median) | vs off | acceptance "
          "| drafted tokens accepted per generated token | predicted speed-up | token cost | decode steps held |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        pred = "-" if r.get("predicted") is None else f"{r['predicted']:.2f}x"
        c = "-" if r.get("token_cost") is None else f"{r['token_cost']:.2f}"
        h = "-" if r.get("held") is None else f"{r['held']:.2f}"
        print(f"| {r['prompts']} | {r['concurrency']} | {r['temperature']:g} | {r['config']} | {r['tok_s']:.1f} "
              f"| {r['ratio']:.2f}x | {acc} | {r['accepted_per_token']:.2f} | {pred} | {c} | {h} |")
    print()
    heads = " | ".join(f"position {i + 1}" for i in range(depth))
    print("Share of the drafts reaching each position whose tokens up to it were all accepted (drafts reaching it):")
    print()
    print(f"| prompts | concurrency | temperature | config | {heads} |")
    print("|---|---|---|---|" + "---|" * depth)
    for r in [r for r in rows if any(r["drafted_by_position"])]:
        cells = [
            "-" if p is None else f"{p:.2f} ({d})"
            for p, d in zip(r["by_position"] + [None] * depth, r["drafted_by_position"] + [0] * depth)
        ][:depth]
        print(f"| {r['prompts']} | {r['concurrency']} | {r['temperature']:g} | {r['config']} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
