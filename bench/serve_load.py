"""Closed-loop load on an OpenAI-compatible server (ours or llama.cpp's): CONCURRENCY clients each send
streaming /v1/completions requests back to back until REQUESTS are done. Prints one JSON object:
output tokens/s over the run, TTFT P50/P99, mean inter-token latency, errors.

Until `tgi bench` exists, bench/serve_vs_llamacpp.sh runs this against both servers.
Usage: serve_load.py URL --concurrency C --requests N --prompt-tokens P --max-tokens M
"""

import argparse
import asyncio
import json
import random
import statistics
import time

from openai import AsyncOpenAI


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def one(client, model, prompt, max_tokens):
    t0 = time.perf_counter()
    ttft, n, last = None, 0, t0
    gaps = []
    stream = await client.completions.create(
        model=model, prompt=prompt, max_tokens=max_tokens, temperature=0, stream=True,
        extra_body={"ignore_eos": True},
    )
    async for chunk in stream:
        if not chunk.choices or not chunk.choices[0].text:
            continue
        now = time.perf_counter()
        if ttft is None:
            ttft = now - t0
        else:
            gaps.append(now - last)
        last = now
        n += 1
    return {"ttft": ttft, "tokens": n, "e2e": time.perf_counter() - t0, "gaps": gaps}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    a = ap.parse_args()
    client = AsyncOpenAI(base_url=a.url + "/v1", api_key="unused", timeout=3600, max_retries=0)
    model = (await client.models.list()).data[0].id
    # Each of these words is one token in Llama's vocabulary, so BOS + P-1 of them is a P-token prompt; drawn at
    # random per request (seeded), so that no server gets prefix-cache hits another would not.
    words = ["hello", "world", "cat", "dog", "sun", "tree", "house", "car"]
    rng = random.Random(0)
    prompts = [" ".join(rng.choice(words) for _ in range(a.prompt_tokens - 1)) for _ in range(a.requests)]
    todo = list(range(a.requests))
    results, errors = [], []

    async def worker():
        while todo:
            i = todo.pop()
            try:
                results.append(await one(client, model, prompts[i], a.max_tokens))
            except Exception as e:  # noqa: BLE001 - counted and reported
                errors.append(repr(e))

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(a.concurrency)))
    wall = time.perf_counter() - t0
    ttfts = [r["ttft"] for r in results if r["ttft"] is not None]
    gaps = [g for r in results for g in r["gaps"]]
    print(json.dumps({
        "concurrency": a.concurrency,
        "requests_ok": len(results),
        "errors": errors[:3],
        "error_count": len(errors),
        "output_tokens": sum(r["tokens"] for r in results),
        "output_tokens_per_s": sum(r["tokens"] for r in results) / wall,
        "ttft_p50_ms": 1e3 * pct(ttfts, 50) if ttfts else None,
        "ttft_p99_ms": 1e3 * pct(ttfts, 99) if ttfts else None,
        "itl_mean_ms": 1e3 * statistics.mean(gaps) if gaps else None,
        "wall_s": wall,
    }))


if __name__ == "__main__":
    asyncio.run(main())
