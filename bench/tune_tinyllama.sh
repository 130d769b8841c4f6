#!/usr/bin/env bash
# tgi tune on the TinyLlama-1.1B-shaped model under the 4-core/8 GB x86 profile (clamped to this machine's
# cores), then the chosen configuration against tgi serve's defaults, both measured by tgi bench in the same run.
# The workload is cut down (8 requests of 64 in / 32 out, 4 clients) and the SLOs loosened so that a shared
# 2-core machine finishes in minutes; see README "Tuning (tgi tune)".
set -euo pipefail
TGI=${TGI:-target/release/tgi}
MODEL=${MODEL:-bench/out/tinyllama-q4_k_m.tgi.gguf}
OUT=${OUT:-bench/out/tune}
SLO=${SLO:-ttft=20s,tpot=1s,e2e=60s}
mkdir -p "$OUT"
WORKLOAD=(--requests 8 -c 4 --input-tokens 64 --output-tokens 32)
"$TGI" tune -m "$MODEL" --profile x86-4c8g --slo "$SLO" "${WORKLOAD[@]}" \
  ${SWEEP:---threads 1,2 --max-batch-size 1,4} --budget ${BUDGET:-4} \
  --out "$OUT/best.toml" --journal "$OUT/trials.jsonl" --json "$OUT/tune.json" --plot "$OUT/charts" --no-install
BENCH=("${WORKLOAD[@]}" --tokenizer "$MODEL" --ignore-eos --warmup 2 --slo "$SLO" --force)
"$TGI" bench -m "$MODEL" "${BENCH[@]}" --label "serve defaults" --json "$OUT/defaults.json"
# No -m here: the tuned file names the model it chose (a quantized copy when --quantize was swept), and a
# --model flag would override the file's.
"$TGI" bench "${BENCH[@]}" --serve-arg="--config=$OUT/best.toml" --label "tuned" --json "$OUT/tuned.json"
"$TGI" bench compare "$OUT/defaults.json" "$OUT/tuned.json"
