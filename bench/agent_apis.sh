#!/usr/bin/env bash
# The three chat APIs (chat completions, Anthropic Messages, OpenAI Responses) against one `tgi serve` of Gemma 3
# 270M (prefix caching off, so that no API reuses the prompts of another): the same prompts and lengths, 3 rounds.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}; G=${1:?usage: bench/agent_apis.sh GEMMA_GGUF (tests/gemma/fetch.sh prints it)}; O=${OUT:-$ROOT/bench/out/agents}; mkdir -p $O
$T serve -m $G --port "${PORT:-3190}" -t 2 --chat-template gemma --no-prefix-caching > $O/serve.log 2>&1 & S=$!
trap 'kill $S' EXIT
until curl -sf "localhost:${PORT:-3190}/health" >/dev/null; do sleep 0.2; done
for rep in 1 2 3; do
for api in chat anthropic responses; do
  if [[ $api == chat ]]; then a=(--api openai --endpoint chat); else a=(--api $api); fi
  $T bench --url "localhost:${PORT:-3190}" "${a[@]}" --ignore-eos -c 4 --requests 24 --warmup 4 -p 128 -n 64 --tokenizer $G --seed 7 --quiet --json $O/$api-$rep.json --force
done; done
python3 - $O <<'PY'
import json,sys,os
o=sys.argv[1]
print("| API | rep | TTFT P50 (ms) | TTFT P99 (ms) | ITL P50 (ms) | output tok/s |")
print("| --- | --- | --- | --- | --- | --- |")
for rep in (1,2,3):
    for api in ("chat","anthropic","responses"):
        s=json.load(open(f"{o}/{api}-{rep}.json"))["runs"][0]["summary"]
        print(f"| {api} | {rep} | {s['ttft_ms']['p50']:.1f} | {s['ttft_ms']['p99']:.1f} | {s['itl_ms']['p50']:.1f} | {s['output_tokens_per_s']:.1f} |")
PY
