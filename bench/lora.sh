#!/usr/bin/env bash
# Multi-LoRA serving on the TinyLlama-1.1B shape, Q4_K_M (random weights from bench/make-checkpoint), with
# ADAPTERS random rank-RANK PEFT adapters on all seven linear projections (bench/make_lora_adapters.py): output
# tok/s at CONCURRENCY clients (one `tgi bench` per client, streaming /v1/completions, PROMPT-token prompts, GEN
# new tokens, EOS ignored, PER requests each; the figure is the sum over the clients) for
#
#   base  every request on the base model;
#   one   every request on one adapter (`model: a0`);
#   many  request i on adapter i mod ADAPTERS;
#
# and the load time of one rank-RANK adapter (tgi_lora_load_seconds in /metrics, for the ADAPTERS loaded at
# start, and one more loaded through POST /v1/load_lora_adapter). One server serves all three rounds. The
# issue's targets: one >= 0.85x base, many >= 0.8x one, a load under 100 ms.
#
# Usage: bench/lora.sh
# Environment: THREADS (2), CONCURRENCY (16), PER (3), PROMPT (64), GEN (32), RANK (16), ADAPTERS (16), PORT
# (3191), WORK (bench/out: checkpoint and GGUF, reused), OUT (bench/out/lora), TGI (target/release/tgi).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
THREADS=${THREADS:-2}; C=${CONCURRENCY:-16}; PER=${PER:-3}; PROMPT=${PROMPT:-64}; GEN=${GEN:-32}
RANK=${RANK:-16}; N=${ADAPTERS:-16}; PORT=${PORT:-3191}
WORK=${WORK:-$ROOT/bench/out}; mkdir -p "$WORK"; WORK=$(cd "$WORK" && pwd)
O=${OUT:-$WORK/lora}; mkdir -p "$O"
log() { echo "[$(date +%T)] $*" >&2; }

echo "CPU: $(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo), family $(awk -F': ' '/^cpu family/ { print $2; exit }' /proc/cpuinfo), $(nproc) cores, $THREADS threads"
echo "flags: $(awk -F': ' '/^flags/ { print $2; exit }' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx|fma|f16c|amx)' | tr '\n' ' ')"
echo "workload: $C clients x $PER requests, $PROMPT-token prompts, $GEN new tokens; $N adapters of rank $RANK"

[[ -x $TGI ]] || (cd "$ROOT" && cargo build --release -p tgi)
CKPT=$WORK/tinyllama-1.1b
MODEL=$WORK/tinyllama-q4_k_m.tgi.gguf
[[ -d $CKPT ]] || { log "making the checkpoint"; (cd "$ROOT" && cargo run --release -q -p tgi-make-checkpoint -- --shape tinyllama-1.1b -o "$CKPT"); }
[[ -f $MODEL ]] || { log "quantizing to Q4_K_M"; "$TGI" quantize "$CKPT" --type q4_k_m -o "$MODEL" -q; }
ADIR=$WORK/lora-adapters-r$RANK
[[ -f $ADIR/a$N/adapter_model.safetensors ]] || { log "making $((N + 1)) adapters"; python3 "$ROOT/bench/make_lora_adapters.py" "$CKPT" "$ADIR" --count $((N + 1)) --rank "$RANK" >/dev/null; }
list=$(for i in $(seq 0 $((N - 1))); do printf 'a%d=%s/a%d,' "$i" "$ADIR" "$i"; done)

log "starting tgi serve with $N adapters"
"$TGI" serve -m "$MODEL" --port "$PORT" -t "$THREADS" --no-prefix-caching --max-batch-size "$C" \
    --lora-adapters "${list%,}" --max-loras $((N + 1)) --max-lora-rank "$RANK" > "$O/serve.log" 2>&1 & S=$!
trap 'kill $S 2>/dev/null' EXIT
until curl -sf "localhost:$PORT/health" >/dev/null; do kill -0 $S || { cat "$O/serve.log"; exit 1; }; sleep 0.5; done

round() { # name model-of-client-i...
    local name=$1 pids=() i
    for i in $(seq 0 $((C - 1))); do
        "$TGI" bench --url "localhost:$PORT" --api openai --endpoint completions --model-name "$($2 "$i")" \
            -c 1 --requests "$PER" -p "$PROMPT" -n "$GEN" --ignore-eos --tokenizer "$MODEL" --seed "$i" --timeout 900 \
            --quiet --json "$O/$name-$i.json" --force & pids+=($!)
    done
    wait "${pids[@]}"
}
base_model() { echo tgi; }
one_adapter() { echo a0; }
many_adapters() { echo "a$(($1 % N))"; }
for r in base:base_model one:one_adapter many:many_adapters; do
    log "round ${r%%:*}"; round "${r%%:*}" "${r#*:}"
done
curl -s "localhost:$PORT/metrics" > "$O/metrics.txt"
curl -s -o "$O/load.json" -w '%{time_total}\n' "localhost:$PORT/v1/load_lora_adapter" -H 'Content-Type: application/json' \
    -d "{\"lora_name\": \"extra\", \"lora_path\": \"$ADIR/a$N\"}" > "$O/load_curl_seconds.txt"
grep -m1 'held back' "$O/serve.log" || true

python3 - "$O" "$C" <<'PY'
import json, re, sys
o, c = sys.argv[1], int(sys.argv[2])
def tps(name):
    runs = [json.load(open(f"{o}/{name}-{i}.json"))["runs"][0]["summary"] for i in range(c)]
    return sum(r["output_tokens_per_s"] for r in runs), max(r["itl_ms"]["p50"] for r in runs)
rows = {n: tps(n) for n in ("base", "one", "many")}
print("| round | output tok/s (sum of clients) | ITL P50, slowest client (ms) |")
print("| --- | --- | --- |")
for n, (t, itl) in rows.items():
    print(f"| {n} | {t:.1f} | {itl:.1f} |")
loads = [float(m) for m in re.findall(r'^tgi_lora_load_seconds\{[^}]*\} (\S+)', open(f"{o}/metrics.txt").read(), re.M)]
extra = json.load(open(f"{o}/load.json"))
curl = float(open(f"{o}/load_curl_seconds.txt").read())
one, base, many = rows["one"][0], rows["base"][0], rows["many"][0]
print(f"\none / base = {one / base:.2f} (target >= 0.85); many / one = {many / one:.2f} (target >= 0.8)")
if loads:
    print(f"load at start: {len(loads)} adapters, median {sorted(loads)[len(loads) // 2] * 1e3:.0f} ms, max {max(loads) * 1e3:.0f} ms")
print(f"load through /v1/load_lora_adapter: {extra} ({curl * 1e3:.0f} ms for the whole request) (target < 100 ms)")
PY
