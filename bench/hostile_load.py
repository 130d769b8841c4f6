#!/usr/bin/env python3
"""Hostile-input campaign for issue 22, items 2 and 3 (stdlib only).

1. Hyperparameters: copies of the bundled model with one config.json value or one GGUF metadata value
   replaced by a hostile one (0, -1, NaN, inf, 1e30, huge integers, strings, null, non-dividing head
   counts, ...), each run through `tgi generate` with a timeout. Reports cases, exits 0 / 2 / other,
   panics (stderr containing 'panicked') and timeouts.
2. Prompt size: `tgi serve` on the bundled model; clients sending ~1.9 MB prompts to /generate and
   /tokenize in a loop while one client times small /generate requests. Reports the huge requests'
   statuses, latencies and response sizes, and the small requests' latencies beside them and alone.

Usage: bench/hostile_load.py [--tgi target/release/tgi] [--only hyper|prompt] [--timeout 60]
"""

import argparse
import http.client
import json
import math
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF = os.path.join(ROOT, "models", "stories260k", "hf")
GGUF = os.path.join(ROOT, "models", "stories260k", "stories260k-f32.gguf")

# ---------------------------------------------------------------------------------------------- GGUF I/O

# GGUF value types: (code, struct format) for scalars.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
          U64: "<Q", I64: "<q", F64: "<d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.data[self.pos:self.pos + n]
        self.pos += n
        return s.decode("utf-8")

    def value(self, ty):
        if ty in SCALAR:
            return self.take(SCALAR[ty])
        if ty == STRING:
            return self.string()
        if ty == ARRAY:
            item, n = self.take("<I"), self.take("<Q")
            return (item, [self.value(item) for _ in range(n)])
        raise ValueError(f"GGUF value type {ty}")


def pack_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def pack_value(ty, v):
    if ty in SCALAR:
        return struct.pack(SCALAR[ty], v)
    if ty == STRING:
        return pack_string(v)
    item, items = v
    return struct.pack("<IQ", item, len(items)) + b"".join(pack_value(item, x) for x in items)


def read_gguf(path):
    """(metadata as [(key, type, value)], tensor-info bytes, data section bytes, alignment)."""
    data = open(path, "rb").read()
    r = Reader(data)
    assert r.take("<I") == 0x46554747, "not a GGUF file"
    version, n_tensors, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    assert version == 3, f"GGUF version {version}"
    meta = []
    for _ in range(n_kv):
        key = r.string()
        ty = r.take("<I")
        meta.append((key, ty, r.value(ty)))
    start = r.pos
    for _ in range(n_tensors):
        r.string()
        dims = r.take("<I")
        r.pos += 8 * dims + 4 + 8
    infos = data[start:r.pos]
    align = next((v for k, _, v in meta if k == "general.alignment"), 32)
    data_start = (r.pos + align - 1) // align * align
    return meta, n_tensors, infos, data[data_start:], align


def write_gguf(path, meta, n_tensors, infos, tensor_data, align):
    head = struct.pack("<IIQQ", 0x46554747, 3, n_tensors, len(meta))
    head += b"".join(pack_string(k) + struct.pack("<I", ty) + pack_value(ty, v) for k, ty, v in meta)
    head += infos
    head += b"\0" * ((-len(head)) % align)
    with open(path, "wb") as f:
        f.write(head)
        f.write(tensor_data)


# ---------------------------------------------------------------------------------------------- cases

HF_INTS = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
           "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings", "sliding_window"]
# The bundled config.json is transformers 5's: its RoPE base is rope_parameters.rope_theta.
HF_FLOATS = ["rms_norm_eps", "rope_parameters.rope_theta"]
HOSTILE_JSON = [0, -1, "NaN", "Infinity", 1e30, 2**40, 2**64, "64", None, 3, 7]

GGUF_INTS = ["llama.embedding_length", "llama.feed_forward_length", "llama.block_count",
             "llama.attention.head_count", "llama.attention.head_count_kv", "llama.context_length",
             "llama.attention.sliding_window", "llama.attention.key_length", "llama.rope.dimension_count"]
GGUF_FLOATS = ["llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"]
HOSTILE_GGUF_INT = [(U32, 0), (I32, -1), (U64, 2**40), (U64, 2**64 - 1), (STRING, "64"), (U32, 3), (F32, 8.0)]
HOSTILE_GGUF_FLOAT = [(F32, 0.0), (F32, -1.0), (F32, math.nan), (F32, math.inf), (F32, 1e30), (STRING, "x")]


def rope(kind, **fields):
    """A transformers 5 `rope_parameters` object (the bundled config.json's form)."""
    return {"rope_theta": 10000.0, "rope_type": kind, **fields}


def hf_cases():
    cases = []
    for key in HF_INTS + HF_FLOATS:
        for v in HOSTILE_JSON:
            cases.append((f"config.json {key}={v}", {key: v}))
    cases += [
        ("config.json rope_parameters linear factor 0", {"rope_parameters": rope("linear", factor=0)}),
        ("config.json rope_parameters linear factor -2", {"rope_parameters": rope("linear", factor=-2)}),
        ("config.json rope_parameters linear factor NaN", {"rope_parameters": rope("linear", factor=math.nan)}),
        ("config.json rope_parameters linear factor 1e30", {"rope_parameters": rope("linear", factor=1e30)}),
        ("config.json rope_parameters llama3 high==low", {"rope_parameters": rope(
            "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=1.0, original_max_position_embeddings=256)}),
        ("config.json rope_parameters llama3 orig 0", {"rope_parameters": rope(
            "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=0)}),
        ("config.json hidden_size 60 (not heads x head_dim)", {"hidden_size": 60}),
    ]
    return cases


def gguf_cases():
    cases = []
    for key in GGUF_INTS:
        for ty, v in HOSTILE_GGUF_INT:
            cases.append((f"gguf {key}={v!r}:{ty}", {key: (ty, v)}))
    for key in GGUF_FLOATS:
        for ty, v in HOSTILE_GGUF_FLOAT:
            cases.append((f"gguf {key}={v!r}:{ty}", {key: (ty, v)}))
    cases.append(("gguf rope.scaling linear factor 0",
                  {"llama.rope.scaling.type": (STRING, "linear"), "llama.rope.scaling.factor": (F32, 0.0)}))
    cases.append(("gguf rope.scaling linear factor NaN",
                  {"llama.rope.scaling.type": (STRING, "linear"), "llama.rope.scaling.factor": (F32, math.nan)}))
    return cases


def write_hf(dir, changes):
    model = os.path.join(dir, "hf")
    shutil.copytree(HF, model)
    path = os.path.join(model, "config.json")
    cfg = json.load(open(path))
    for k, v in changes.items():
        obj = cfg
        *parents, leaf = k.split(".")
        for p in parents:
            obj = obj.setdefault(p, {})
        obj[leaf] = float(v) if v in ("NaN", "Infinity") else v
    # allow_nan writes NaN / Infinity literals, as Python's json does by default (invalid JSON).
    open(path, "w").write(json.dumps(cfg))
    return model


def write_mutated_gguf(dir, changes, base):
    meta, n, infos, data, align = base
    meta = [(k, ty, v) for k, ty, v in meta if k not in changes]
    meta += [(k, ty, v) for k, (ty, v) in changes.items()]
    path = os.path.join(dir, "model.gguf")
    write_gguf(path, meta, n, infos, data, align)
    return path


def run_hyper(tgi, timeout):
    base = read_gguf(GGUF)
    rows = []
    for kind, cases in (("config.json", hf_cases()), ("GGUF", gguf_cases())):
        for name, changes in cases:
            with tempfile.TemporaryDirectory(prefix="tgi-hostile-") as d:
                path = write_hf(d, changes) if kind == "config.json" else write_mutated_gguf(d, changes, base)
                try:
                    p = subprocess.run([tgi, "generate", "-m", path, "-n", "4", "--temperature", "0",
                                        "Once upon a time"], capture_output=True, timeout=timeout, text=True)
                    code, err = p.returncode, p.stderr
                except subprocess.TimeoutExpired:
                    code, err = "timeout", ""
            rows.append((kind, name, code, "panicked" in err, err.strip().splitlines()[-1:] if err else []))
    print(f"\n## Hyperparameters: {len(rows)} mutated models through `tgi generate`\n")
    print("| source | cases | exit 0 | exit 2 | other exits | panics | timeouts |")
    print("|---|---|---|---|---|---|---|")
    for kind in ("config.json", "GGUF", "all"):
        rs = [r for r in rows if kind in ("all", r[0])]
        other = [r for r in rs if r[2] not in (0, 2, "timeout")]
        print(f"| {kind} | {len(rs)} | {sum(r[2] == 0 for r in rs)} | {sum(r[2] == 2 for r in rs)} | "
              f"{len(other)} | {sum(r[3] for r in rs)} | {sum(r[2] == 'timeout' for r in rs)} |")
    print("\nCases not refused with exit 2 (accepted values, or failures of another kind):\n")
    for kind, name, code, panicked, last in rows:
        if code != 2:
            print(f"- {name}: exit {code}{' PANIC' if panicked else ''} {last[0][:160] if last else ''}")
    return rows


# ---------------------------------------------------------------------------------------------- prompts

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t = time.perf_counter()
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, time.perf_counter() - t, len(data)


def small_latencies(port, n):
    body = json.dumps({"inputs": "Once upon a time", "parameters": {"max_new_tokens": 8}}).encode()
    return [post(port, "/generate", body)[1] for _ in range(n)]


def run_prompt(tgi, clients, seconds):
    port = free_port()
    # The log goes to a file: an unread pipe fills up and blocks the server.
    log = tempfile.TemporaryFile()
    server = subprocess.Popen([tgi, "serve", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        alone = small_latencies(port, 50)
        huge = json.dumps({"inputs": "Once upon a time " * (1_900_000 // 17)}).encode()
        print(f"\n## Prompt size: {len(huge)} byte bodies, {clients} clients per route, {seconds} s\n")
        print("| route | requests | statuses | p50 latency (s) | max latency (s) | largest response (bytes) |")
        print("|---|---|---|---|---|---|")
        results = {}
        for route in ("/generate", "/tokenize"):
            stop = threading.Event()
            got = []

            def hammer():
                while not stop.is_set():
                    got.append(post(port, route, huge))

            threads = [threading.Thread(target=hammer) for _ in range(clients)]
            for t in threads:
                t.start()
            time.sleep(0.5)
            t_end = time.time() + seconds
            beside = []
            while time.time() < t_end:
                beside += small_latencies(port, 1)
            stop.set()
            for t in threads:
                t.join()
            statuses = sorted({s for s, _, _ in got})
            lat = [l for _, l, _ in got]
            print(f"| {route} | {len(got)} | {statuses} | {statistics.median(lat):.3f} | {max(lat):.3f} | "
                  f"{max(n for _, _, n in got)} |")
            results[route] = beside
        print("\nSmall /generate (8 tokens) latency, ms: p50 / p99 / max\n")
        for label, xs in [("alone", alone)] + [(f"beside {r} floods", xs) for r, xs in results.items()]:
            xs = sorted(xs)
            p99 = xs[min(len(xs) - 1, int(len(xs) * 0.99))]
            print(f"- {label}: {statistics.median(xs) * 1e3:.1f} / {p99 * 1e3:.1f} / {xs[-1] * 1e3:.1f} "
                  f"({len(xs)} requests)")
    finally:
        server.terminate()
        server.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tgi", default=os.path.join(ROOT, "target", "release", "tgi"))
    ap.add_argument("--only", choices=["hyper", "prompt"])
    ap.add_argument("--timeout", type=float, default=60, help="seconds per `tgi generate` run")
    ap.add_argument("--clients", type=int, default=4, help="clients sending huge prompts, per route")
    ap.add_argument("--seconds", type=float, default=10, help="flood duration per route")
    a = ap.parse_args()
    if a.only in (None, "hyper"):
        run_hyper(a.tgi, a.timeout)
    if a.only in (None, "prompt"):
        run_prompt(a.tgi, a.clients, a.seconds)


if __name__ == "__main__":
    sys.exit(main())
