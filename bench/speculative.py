#!/usr/bin/env python3
"""Speculative decoding benchmark: `tgi serve` with speculation off and with each method (n-gram, a draft model,
Medusa heads; adaptive, or `-fixed` at depth 4), on copy-heavy prompts (the answer repeats or edits the prompt)
and on ordinary story prompts, at several concurrencies.

Starts one server per configuration (they idle while another is measured), then for each prompt set and
concurrency measures the configurations back to back, REPEATS times in rotating order (other work on the
machine then hits all of them alike), and reports the median decode throughput (generated tokens per second of
wall time over all clients, greedy /generate requests of MAX_NEW tokens), the median over repeats of its ratio
to speculation off measured in the same repeat, the acceptance (accepted / drafted tokens, from each response's
`details`), and the speed-up the engine's adaptive rule predicted (`tgi_speculation_predicted_speedup` from
/metrics after the run, with the measured token cost `tgi_speculation_token_cost`).

Usage: bench/speculative.py [--tgi BIN] [--model PATH] [--concurrency 1,4,16] [--requests 8] [--max-new 128]
                            [--repeats 3] [--configs off,ngram,ngram-fixed] [--draft-model PATH] [--medusa DIR]
                            [--prompt-sets copy-heavy,story] [--extra 'FLAGS'] [--json OUT]
Standard library only.
"""

import argparse
import json
import os
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


def copy_prompts(url, n_tokens):
    """Copy-heavy prompts: a story start, the model's own greedy continuation, a blank line and the start again,
    so that the answer repeats a passage of the prompt (as when a model rewrites a document it was given)."""
    out = []
    for start in STORY:
        r = post(url + "/generate", {"inputs": start, "parameters": {"max_new_tokens": n_tokens}})
        out.append(start + r["generated_text"] + "\n\n" + start)
    return out


def configs(draft_model, medusa):
    """Each configuration's `tgi serve` flags (the draft and Medusa ones only when their files are given)."""
    out = {"off": [], "ngram": ["--speculate", "4", "--speculate-type", "ngram"]}
    if draft_model:
        out["draft"] = ["--speculate", "4", "--draft-model", draft_model]
    if medusa:
        out["medusa"] = ["--speculate", "4", "--medusa", medusa]
    for name in [n for n in out if n != "off"]:
        out[name + "-fixed"] = out[name] + ["--speculate-fixed"]
    return out


def gauge(url, name):
    """A gauge's value from the server's /metrics, None when absent."""
    with urllib.request.urlopen(url + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def start(tgi, model, extra):
    port = free_port()
    cmd = [tgi, "serve", "-m", model, "--port", str(port), "--max-concurrent-requests", "64"] + extra
    # The log goes to a file: an unread pipe fills up and blocks the server once it has logged 64 KiB.
    log = tempfile.TemporaryFile("w+")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/health", timeout=1)
            return p, url
        except Exception:
            if p.poll() is not None:
                log.seek(0)
                sys.exit(f"server {cmd} exited: {log.read()}")
            time.sleep(0.1)
    sys.exit(f"server {cmd} did not start")


def measure(url, prompts, concurrency, requests, max_new):
    """Each of `concurrency` clients sends `requests` greedy requests back to back; returns tokens/s over the
    wall time, drafted and accepted tokens."""
    lock = threading.Lock()
    totals = {"tokens": 0, "drafted": 0, "accepted": 0}

    def client(c):
        for i in range(requests):
            prompt = prompts[(c * requests + i) % len(prompts)]
            r = post(url + "/generate", {"inputs": prompt, "parameters": {"max_new_tokens": max_new, "details": True}})
            d = r["details"]
            with lock:
                totals["tokens"] += d["generated_tokens"]
                totals["drafted"] += d.get("speculated_tokens", 0)
                totals["accepted"] += d.get("accepted_tokens", 0)

    wall = run_clients(concurrency, client)
    return totals["tokens"] / wall, totals["drafted"], totals["accepted"]


def run_clients(concurrency, client):
    """Runs `client(c)` for c in 0..concurrency on as many threads at once; returns the wall time in seconds."""
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tgi", default=os.path.join(ROOT, "target/release/tgi"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models/stories260k/stories260k-f32.gguf"))
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--requests", type=int, default=8, help="requests per client")
    ap.add_argument("--max-new", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--configs", default="off,ngram,ngram-fixed")
    ap.add_argument("--draft-model", help="a draft model for the draft configurations")
    ap.add_argument("--medusa", help="a Medusa directory for the medusa configurations")
    ap.add_argument("--prompt-sets", default="copy-heavy,story")
    ap.add_argument("--extra", default="", help="more `tgi serve` flags for every server (e.g. '--threads 2')")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    names = a.configs.split(",")
    known = configs(a.draft_model, a.medusa)
    missing = [n for n in names if n not in known]
    if missing:
        sys.exit(f"unknown configurations {missing} (draft and medusa need --draft-model / --medusa): {list(known)}")
    servers = {n: start(a.tgi, a.model, known[n] + a.extra.split()) for n in names}
    rows = []
    try:
        sets = a.prompt_sets.split(",")
        copy = copy_prompts(servers[names[0]][1], a.max_new + 32) if "copy-heavy" in sets else []
        for set_name, prompts in [(s, copy if s == "copy-heavy" else STORY) for s in sets]:
            for conc in [int(c) for c in a.concurrency.split(",")]:
                for n in names:  # warm-up
                    measure(servers[n][1], prompts, conc, 1, 16)
                runs = {n: [] for n in names}
                drafted = {n: 0 for n in names}
                accepted = {n: 0 for n in names}
                predicted = {n: [] for n in names}
                cost = {n: [] for n in names}
                for r in range(a.repeats):
                    order = names[r % len(names):] + names[: r % len(names)]
                    for n in order:
                        tps, d, acc = measure(servers[n][1], prompts, conc, a.requests, a.max_new)
                        runs[n].append(tps)
                        drafted[n] += d
                        accepted[n] += acc
                        if n != "off":
                            predicted[n].append(gauge(servers[n][1], "tgi_speculation_predicted_speedup"))
                            cost[n].append(gauge(servers[n][1], "tgi_speculation_token_cost"))
                for n in names:
                    # Each repeat measured every configuration back to back: the median of per-repeat ratios.
                    ratios = [x / y for x, y in zip(runs[n], runs[names[0]])]
                    rows.append({
                        "prompts": set_name, "concurrency": conc, "config": n,
                        "tok_s": round(statistics.median(runs[n]), 1),
                        "ratio": round(statistics.median(ratios), 3),
                        "runs": [round(x, 1) for x in runs[n]],
                        "acceptance": round(accepted[n] / drafted[n], 3) if drafted[n] else None,
                        "accepted_per_token": round(accepted[n] / (a.repeats * conc * a.requests * a.max_new), 3),
                        "predicted": round(statistics.median(predicted[n]), 3) if predicted[n] else None,
                        "token_cost": round(statistics.median(cost[n]), 3) if cost[n] else None,
                    })
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait()
    print("| prompts | concurrency | config | decode tok/s (median) | vs off | acceptance | drafted tokens accepted per generated token | predicted speed-up | token cost |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        pred = "-" if r["predicted"] is None else f"{r['predicted']:.2f}x"
        c = "-" if r["token_cost"] is None else f"{r['token_cost']:.2f}"
        print(f"| {r['prompts']} | {r['concurrency']} | {r['config']} | {r['tok_s']:.1f} | {r['ratio']:.2f}x | {acc} | {r['accepted_per_token']:.2f} | {pred} | {c} |")
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(rows, f, indent=1)
        os.replace(tmp, a.json)


if __name__ == "__main__":
    main()
