"""The README's deployment figures (a measurement, not a test): `tgi bench` at concurrency 16 on the
bundled model against one replica directly, against three replicas behind HAProxy, and against one
replica through HAProxy (the other two drained), which isolates the router's added latency; then a
cached against an uncached request's latency on one `tgi serve --response-cache-size`.

Usage: python3 tests/deploy/measure.py TGI_BINARY [SECONDS_PER_RUN]
"""

import signal
import statistics
import subprocess
import sys
import tempfile
import time

from replicas import Cluster, http, listening_port

SERVE = ["--threads", "1", "--drain-delay", "1", "--max-batch-size", "16"]
BENCH = ["--concurrency", "16", "--input-tokens", "32", "--output-tokens", "32", "--timeout", "60"]


def row(name, run):
    s = run["summary"]
    errors = sum(s["errors"].values())
    print(f"| {name} | {s['requests_per_s']:.1f} | {s['output_tokens_per_s']:.0f} | {s['ttft_ms']['p50']:.1f} | "
          f"{s['ttft_ms']['p99']:.1f} | {s['e2e_ms']['p50']:.1f} | {s['e2e_ms']['p99']:.1f} | {errors} |")
    return s


def replicas(tgi, seconds):
    with Cluster(tgi, SERVE) as c:
        duration = ["--duration", f"{seconds}s", "--warmup", "16"]
        print("| target (concurrency 16) | req/s | output tok/s | TTFT p50 ms | TTFT p99 ms | E2E p50 ms | E2E p99 ms | errors |")
        print("|---|---|---|---|---|---|---|---|")
        direct = row("1 replica, direct", c.bench(c.replicas[0].base, "direct.json", *BENCH, *duration))
        row("3 replicas behind HAProxy", c.bench(c.url, "router3.json", *BENCH, *duration))
        for r in c.replicas[1:]:
            r.signal(signal.SIGTERM)
        for r in c.replicas[1:]:
            r.proc.wait(timeout=120)
            c.wait_down(r)
        via = row("1 replica through HAProxy", c.bench(c.url, "router1.json", *BENCH, *duration))
        added = via["e2e_ms"]["p50"] - direct["e2e_ms"]["p50"]
        print(f"\nrouter's added latency per request (E2E p50, same single replica): {added:.2f} ms")


def cache(tgi, n=200):
    log = tempfile.NamedTemporaryFile("w", prefix="tgi-measure-", suffix=".log")
    proc = subprocess.Popen([tgi, "serve", "--port", "0", "--response-cache-size", "100"], stderr=log)
    try:
        base = f"http://127.0.0.1:{listening_port(proc, log.name)}"
        body = {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 64}}

        def timed(headers):
            t = time.perf_counter()
            status, _ = http(base + "/generate", body, headers=headers)
            assert status == 200
            return (time.perf_counter() - t) * 1000

        uncached = [timed({"Cache-Control": "no-cache"}) for _ in range(n)]
        cached = [timed({}) for _ in range(n)]
        med = statistics.median
        print(f"\n/generate, 64 new tokens, {n} sequential requests each: uncached median {med(uncached):.2f} ms, "
              f"cached median {med(cached):.2f} ms ({med(uncached) / med(cached):.0f}x)")
    finally:
        proc.terminate()
        proc.wait()
        log.close()


if __name__ == "__main__":
    tgi = sys.argv[1]
    replicas(tgi, int(sys.argv[2]) if len(sys.argv) > 2 else 20)
    cache(tgi)
