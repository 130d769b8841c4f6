#!/usr/bin/env python3
"""The prepared GPU check of `tgi --features cuda` (see bench/gpu/README.md); bench/gpu/check.sh runs it.

Steps, each time-boxed so that the whole run fits in --budget seconds (default 480, under the device's 10 minutes):
  a. correctness: the bundled models on the device vs `--device cpu`, F32 and F16: teacher-forced log-probabilities
     over held-out text (`tgi perplexity --kl-divergence`: KL, top-token agreement) and 32 greedy tokens with their
     log-probabilities (`tgi generate --json --logprobs`);
  b. concurrency: `tgi serve` on the device, 32 concurrent streams equal to each run alone (tests/serve.rs's check);
  c. perf on a random checkpoint of a real shape made here (make-checkpoint, then tgi quantize): decode tok/s at
     batch 1 (F16, Q8_0, Q4_K_M), prefill tok/s at 512 tokens, `tgi bench` in-process at concurrency 1, 8, 32, 64
     (128-token prompts, 128 new tokens), GPU memory used (nvidia-smi);
  d. peer: transformers + PyTorch generating from the same HF checkpoint in F16, batch 1 and a static batch of 32.
Writes results.json and summary.md into --out as it goes (a step that runs out of time is reported, not fatal).
"""

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

# Tolerances of the device against the CPU (log-probabilities, natural log).
TOLERANCE = {
    "f32": {"kl_mean": 1e-6, "max_dlogprob": 1e-3},
    "f16": {"kl_mean": 1e-3, "max_dlogprob": 5e-2},
}
HBM_BYTES_PER_S = 4.8e12  # H200
PROMPT_WORDS = "Once upon a time there was a little girl named Lily who liked to play in the park with her dog"


class Run:
    """The run's clock, its results and the files it writes."""

    def __init__(self, args):
        self.args = args
        self.deadline = time.monotonic() + args.budget
        self.results = {"device": args.device, "shape": args.shape, "steps": {}}
        os.makedirs(args.out, exist_ok=True)
        self.work = os.path.join(args.out, "work") if args.keep else args.work
        os.makedirs(self.work, exist_ok=True)

    def left(self):
        return self.deadline - time.monotonic()

    def log(self, msg):
        print(f"[{self.args.budget - self.left():6.1f}s] {msg}", flush=True)

    def save(self):
        with open(os.path.join(self.args.out, "results.json"), "w") as f:
            json.dump(self.results, f, indent=1)
        with open(os.path.join(self.args.out, "summary.md"), "w") as f:
            f.write(summary(self.results))

    def step(self, name, need, fn):
        """Runs fn(timeout) when `need` seconds are left, recording its result or why it did not finish."""
        left = self.left()
        if left < need:
            self.results["steps"][name] = {"status": "skipped", "why": f"{left:.0f} s left, {need} s needed"}
            self.log(f"{name}: skipped ({left:.0f} s left)")
        else:
            self.log(f"{name}: start")
            t0 = time.monotonic()
            try:
                out = fn(left)
                self.results["steps"][name] = {"status": "ok", "seconds": round(time.monotonic() - t0, 1), **out}
            except Exception as e:  # noqa: BLE001 - every failure is recorded and the run goes on
                self.results["steps"][name] = {"status": "failed", "why": f"{type(e).__name__}: {e}"}
            self.log(f"{name}: {self.results['steps'][name]['status']} in {time.monotonic() - t0:.1f} s")
        self.save()


def sh(cmd, timeout, env=None):
    """Runs cmd, returning stdout; raises with stderr's tail on failure or timeout."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1, timeout), env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"timed out after {timeout:.0f} s: {' '.join(cmd)}") from None
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p.stdout


def gpu_memory_mib():
    """Used memory of GPU 0 in MiB, or None without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
        capture_output=True, text=True,
    )
    return int(out.stdout.split()[0]) if out.returncode == 0 and out.stdout.strip() else None


class MemoryPeak:
    """Samples GPU memory in the background while a step runs."""

    def __enter__(self):
        self.base, self.peak, self.stop = gpu_memory_mib(), None, threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self):
        while not self.stop.wait(0.5):
            m = gpu_memory_mib()
            if m is not None:
                self.peak = max(self.peak or 0, m)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def report(self):
        return {"gpu_mib_before": self.base, "gpu_mib_peak": self.peak}


# ---- a. correctness ----------------------------------------------------------------------------------------

def generate(run, model, device, dtype, prompt, n, timeout, extra=()):
    cmd = [run.args.tgi, "generate", "-m", model, "--device", device, "--dtype", dtype, "--temperature", "0",
           "-n", str(n), "--ignore-eos", "--json", *extra, prompt]
    return json.loads(sh(cmd, timeout))


def correctness(run, model, dtype):
    def go(timeout):
        text = os.path.join(run.args.repo, "models/stories-distill-4l/text/heldout.txt")
        base = os.path.join(run.work, f"kl-{os.path.basename(os.path.dirname(model))}-{dtype}.bin")
        ppl = [run.args.tgi, "perplexity", "-m", model, "--dtype", dtype, "-q", "--json", "--ctx", "128",
               "--chunks", "4", "--kl-divergence-base", base, text]
        sh(ppl + ["--device", "cpu", "--force"], timeout)
        kl = json.loads(sh(ppl + ["--device", run.args.device, "--kl-divergence"], timeout))["kl_divergence"]
        prompt = "Once upon a time, there was a little"
        cpu = generate(run, model, "cpu", dtype, prompt, 32, timeout, ["--logprobs", "5"])
        dev = generate(run, model, run.args.device, dtype, prompt, 32, timeout, ["--logprobs", "5"])
        same = cpu["generated_token_ids"] == dev["generated_token_ids"]
        agree = next((i for i, (a, b) in enumerate(zip(cpu["generated_token_ids"], dev["generated_token_ids"]))
                      if a != b), len(cpu["generated_token_ids"]))
        dlog = max((abs(a["logprob"] - b["logprob"]) for a, b in zip(cpu["logprobs"][:agree], dev["logprobs"][:agree])),
                   default=0.0)
        tol = TOLERANCE[dtype]
        ok = same and kl["mean"] <= tol["kl_mean"] and dlog <= tol["max_dlogprob"]
        return {"pass": ok, "greedy_equal": same, "greedy_tokens_agreeing": agree, "max_dlogprob_greedy": dlog,
                "kl_mean": kl["mean"], "kl_max": kl["max"], "same_top": kl["same_top_p"], "tolerance": tol}
    return go


# ---- b. concurrency -----------------------------------------------------------------------------------------

class Server:
    """A `tgi serve` child on a free port."""

    def __init__(self, run, model, extra, timeout):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(os.path.join(run.work, f"serve-{self.port}.log"), "w")
        self.proc = subprocess.Popen(
            [run.args.tgi, "serve", "-m", model, "--device", run.args.device, "--port", str(self.port),
             "--hostname", "127.0.0.1", *extra], stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"tgi serve exited {self.proc.returncode}: see {self.log.name}")
            try:
                if urllib.request.urlopen(self.url("/health"), timeout=2).status == 200:
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("tgi serve did not become healthy in time")

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def post(self, path, body, timeout):
        req = urllib.request.Request(self.url(path), json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def stream_text(raw):
    events = [json.loads(line[5:]) for line in raw.splitlines() if line.startswith("data:")]
    return events[-1]["generated_text"]


def concurrency(run):
    def go(timeout):
        model = os.path.join(run.args.repo, "models/stories-distill-4l/hf")
        server = Server(run, model, [], min(120, timeout))
        try:
            prompts = [(f"Once upon a time, {['a', 'the', 'one'][i % 3]} little {['cat', 'dog', 'bird', 'girl'][i % 4]}",
                        8 + 7 * i) for i in range(32)]
            body = lambda p, n: {"inputs": p, "parameters": {"max_new_tokens": n, "details": True}}  # noqa: E731
            info = json.loads(urllib.request.urlopen(server.url("/info"), timeout=10).read())
            t0 = time.monotonic()
            solo = [json.loads(server.post("/generate", body(p, n), 60))["generated_text"] for p, n in prompts]
            t_solo = time.monotonic() - t0
            t0 = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(32) as pool:
                together = list(pool.map(lambda pn: stream_text(server.post("/generate_stream", body(*pn), 120)),
                                         prompts))
            t_together = time.monotonic() - t0
        finally:
            server.stop()
        differ = [i for i, (a, b) in enumerate(zip(solo, together)) if a != b]
        return {"pass": not differ, "streams": len(prompts), "differing": differ, "solo_s": round(t_solo, 2),
                "concurrent_s": round(t_together, 2), "max_batch_total_tokens": info.get("max_batch_total_tokens"),
                "kv_cache_budget": info.get("kv_cache_budget")}
    return go


# ---- c. perf ------------------------------------------------------------------------------------------------

def make_models(run):
    def go(timeout):
        hf = os.path.join(run.work, "hf")
        end = time.monotonic() + timeout
        sh([run.args.make_checkpoint, "--shape", run.args.shape, "--dtype", "f16", "-o", hf], timeout)
        sizes = {}
        for ty in ["f16", "q8_0", "q4_k_m"]:
            out = os.path.join(run.work, f"model-{ty}.gguf")
            sh([run.args.tgi, "quantize", hf, "--type", ty, "-o", out, "--force", "--quiet"], end - time.monotonic())
            sizes[ty] = os.path.getsize(out)
        return {"gguf_bytes": sizes, "hf": hf, "weight_bytes_per_token": weight_bytes_per_token(hf)}
    return go


def weight_bytes_per_token(hf):
    """F16 bytes read per decoded token: every matrix but the input embedding (one row of it is read)."""
    c = json.load(open(os.path.join(hf, "config.json")))
    h, f, layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    heads, kv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim", h // heads)
    per_layer = h * heads * hd * 2 + 2 * h * kv * hd + 3 * h * f
    return 2 * (layers * per_layer + vocab * h)


def perf_prompt(n_words):
    words = PROMPT_WORDS.split()
    return " ".join(words[i % len(words)] for i in range(n_words))


def decode(run, ty):
    def go(timeout):
        model = os.path.join(run.work, f"model-{ty}.gguf")
        dtype = ["--dtype", "f16"] if ty == "f16" else []
        cmd = [run.args.tgi, "generate", "-m", model, "--device", run.args.device, *dtype, "--temperature", "0",
               "--ignore-eos", "--json"]
        best = None
        with MemoryPeak() as mem:
            for _ in range(2):  # the first run also warms up the kernels
                out = json.loads(sh(cmd + ["-n", str(run.args.new_tokens), perf_prompt(16)], timeout))
                best = max(best or 0, out["timings"]["decode_tokens_per_second"])
        res = {"decode_tok_s": best, **mem.report()}
        if ty == "f16":
            prefill = cmd + ["-n", "1", "--prefill-chunk", "1024", perf_prompt(run.args.prefill_words)]
            for _ in range(2):  # a warm-up, then the measured run
                out = json.loads(sh(prefill, timeout))
            res["prefill_tokens"] = len(out["prompt_token_ids"])
            res["prefill_tok_s"] = out["timings"]["prefill_tokens_per_second"]
        return res
    return go


def bench(run):
    def go(timeout):
        model = os.path.join(run.work, "model-f16.gguf")
        report = os.path.join(run.work, "bench.json")
        levels = ",".join(str(c) for c in run.args.concurrency)
        cmd = [run.args.tgi, "bench", "-m", model, f"--serve-arg=--device={run.args.device}", "--serve-arg=--dtype=f16",
               "-c", levels, "--duration", f"{run.args.bench_seconds}s", "--warmup", "2", "--input-tokens", "128",
               "--output-tokens", str(run.args.new_tokens), "--api", "openai", "--ignore-eos", "--json", report,
               "--force", "-q"]
        with MemoryPeak() as mem:
            sh(cmd, timeout)
        rep = json.load(open(report))
        levels = {}
        for lvl in rep["runs"]:
            sm = lvl["summary"]
            levels[str(lvl["concurrency"])] = {
                "output_tok_s": sm["output_tokens_per_s"], "requests_per_s": sm["requests_per_s"],
                "requests_ok": sm["requests_ok"], "errors": sm["errors"], "tpot_ms_p50": sm["tpot_ms"]["p50"],
                "ttft_ms_p50": sm["ttft_ms"]["p50"]}
        return {"levels": levels, **mem.report()}
    return go


# ---- d. peer ------------------------------------------------------------------------------------------------

def peer(run):
    def go(timeout):
        hf = os.path.join(run.work, "hf")
        out = os.path.join(run.work, "peer.json")
        cmd = [sys.executable, os.path.join(os.path.dirname(__file__), "peer.py"), "--model", hf,
               "--device", run.args.device, "--new-tokens", str(run.args.new_tokens),
               "--batches", ",".join(map(str, run.args.peer_batches)), "--out", out]
        sh(cmd, timeout)
        return json.load(open(out))
    return go


# ---- summary ------------------------------------------------------------------------------------------------

def summary(r):
    s = r["steps"]
    lines = [f"# tgi GPU check: device {r['device']}, shape {r['shape']}", ""]
    lines += ["| step | status | seconds | result |", "| --- | --- | --- | --- |"]
    for name, v in s.items():
        brief = {k: v[k] for k in v if k not in ("status", "seconds", "levels", "hf")}
        lines.append(f"| {name} | {v['status']} | {v.get('seconds', '')} | {json.dumps(brief)[:300]} |")
    m = s.get("models", {})
    bpt = m.get("weight_bytes_per_token")
    peer_r = s.get("peer", {})
    peer1 = peer_r.get("batch_1", {}).get("tok_s")
    lines += ["", "## Decode at batch 1", "",
              "| type | tok/s | x transformers b1 | HBM roofline tok/s | % of roofline |", "| --- | --- | --- | --- | --- |"]
    for ty in ["f16", "q8_0", "q4_k_m"]:
        d = s.get(f"decode-{ty}", {}).get("decode_tok_s")
        if d is None:
            continue
        size = (bpt if ty == "f16" else m.get("gguf_bytes", {}).get(ty)) or 0
        roof = HBM_BYTES_PER_S / size if size else None
        lines.append(f"| {ty} | {d:.1f} | {ratio(d, peer1)} | {fmt(roof)} | {ratio(d * 100, roof)} |")
    if bpt:
        lines.append(f"\nF16 weight bytes per token: {bpt / 1e9:.3f} GB; roofline = bytes / {HBM_BYTES_PER_S / 1e12} TB/s.")
    pre = s.get("decode-f16", {})
    if "prefill_tok_s" in pre:
        lines.append(f"Prefill (F16, {pre['prefill_tokens']} tokens): {pre['prefill_tok_s']:.0f} tok/s.")
    lv = s.get("bench", {}).get("levels", {})
    peer32 = peer_r.get(f"batch_{max([int(k.split('_')[1]) for k in peer_r if k.startswith('batch_')] or [0])}", {})
    if lv:
        lines += ["", "## tgi bench in-process (F16, 128-token prompts)", "",
                  "| concurrency | output tok/s | req/s | x transformers static batch |", "| --- | --- | --- | --- |"]
        for c, v in lv.items():
            tok = v["output_tok_s"]
            lines.append(f"| {c} | {fmt(tok)} | {fmt(v['requests_per_s'])} | {ratio(tok, peer32.get('tok_s'))} |")
    if peer_r.get("status") == "ok":
        lines += ["", f"## transformers {peer_r.get('transformers', '')} + PyTorch {peer_r['torch']} (same HF checkpoint, "
                  f"{peer_r['dtype']})", ""]
        for k, v in peer_r.items():
            if k.startswith("batch_"):
                lines.append(f"- {k.replace('_', ' ')}: {v['tok_s']:.1f} output tok/s ({v['seconds']:.2f} s for {v['tokens']} tokens)")
    return "\n".join(lines) + "\n"


def fmt(x):
    return "" if x is None else f"{x:.1f}"


def ratio(a, b):
    return "" if a is None or not b else f"{a / b:.2f}"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tgi", required=True)
    p.add_argument("--make-checkpoint", required=True)
    p.add_argument("--repo", default=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape", default="tinyllama-1.1b")
    p.add_argument("--out", required=True)
    p.add_argument("--work", default="/tmp/tgi-gpu-check")
    p.add_argument("--keep", action="store_true", help="keep the work files (checkpoints, logs) under --out")
    p.add_argument("--budget", type=float, default=480)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--prefill-words", type=int, default=480, help="words of the prefill prompt (about 512 tokens)")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32, 64])
    p.add_argument("--bench-seconds", type=int, default=15)
    p.add_argument("--peer-batches", type=lambda s: [int(x) for x in s.split(",")], default=[1, 32])
    args = p.parse_args()
    run = Run(args)
    run.results["tgi_version"] = sh([args.tgi, "--version"], 10).strip()
    run.results["gpu"] = sh(["nvidia-smi", "-L"], 10).strip() if shutil.which("nvidia-smi") else None
    for model in ["models/stories260k/hf", "models/stories-distill-4l/hf"]:
        for dtype in ["f32", "f16"]:
            name = f"correct-{model.split('/')[1]}-{dtype}"
            run.step(name, 20, correctness(run, os.path.join(args.repo, model), dtype))
    run.step("concurrency", 30, concurrency(run))
    run.step("models", 60, make_models(run))
    for ty in ["f16", "q8_0", "q4_k_m"]:
        run.step(f"decode-{ty}", 30, decode(run, ty))
    run.step("bench", len(args.concurrency) * args.bench_seconds + 40, bench(run))
    run.step("peer", 60, peer(run))
    run.results["seconds"] = round(args.budget - run.left(), 1)
    run.save()
    print(open(os.path.join(args.out, "summary.md")).read())


if __name__ == "__main__":
    main()
