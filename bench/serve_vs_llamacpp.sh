#!/usr/bin/env bash
# Measures `tgi serve` against llama.cpp's llama-server on the same GGUF, in the same run: closed-loop load at
# several concurrencies with streaming /v1/completions (bench/serve_load.py), 128-token prompts, 128 new tokens
# (EOS ignored), 2 threads; llama-server gets as many parallel slots as the concurrency.
#
# Usage: bench/serve_vs_llamacpp.sh LLAMA_BIN_DIR [MODEL.gguf]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-server (never built by this script)
#   MODEL.gguf     default bench/out/tinyllama-q4_k_m.tgi.gguf (made by bench/engine_vs_llamacpp.sh)
#
# Environment: CONCURRENCY (default "1 4 16"), REQUESTS_PER_CLIENT (2), THREADS (2), PROMPT (128), GEN (128),
# TGI (default target/release/tgi). Prints a markdown table: output tok/s and TTFT P50/P99 per server and level.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_BIN=$(cd "$1" && pwd)
MODEL=${2:-$ROOT/bench/out/tinyllama-q4_k_m.tgi.gguf}
CONCURRENCY=${CONCURRENCY:-"1 4 16"}
PER=${REQUESTS_PER_CLIENT:-2}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-128}
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -x $LLAMA_BIN/llama-server ]] || { echo "no llama-server in $LLAMA_BIN" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "no model $MODEL (run bench/engine_vs_llamacpp.sh first)" >&2; exit 1; }
[[ -x $TGI ]] || (cd "$ROOT" && cargo build --release)
log() { echo "[$(date +%T)] $*" >&2; }
PORT=18431
PID=

stop() { [[ -n $PID ]] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; PID=; }
trap stop EXIT

wait_ready() {
    for _ in $(seq 600); do
        curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && return 0
        sleep 0.5
    done
    echo "server did not come up" >&2; exit 1
}

run_level() { # server concurrency
    python3 "$ROOT/bench/serve_load.py" "http://127.0.0.1:$PORT" --concurrency "$2" --requests $(($2 * PER)) \
        --prompt-tokens "$PROMPT" --max-tokens "$GEN"
}

declare -A RES
for c in $CONCURRENCY; do
    log "llama-server, $c slots"
    "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$c" -c $((c * (PROMPT + GEN + 16))) --port $PORT \
        --no-webui >/dev/null 2>&1 &
    PID=$!
    wait_ready
    RES[llama,$c]=$(run_level llama "$c")
    stop
    log "tgi serve, concurrency $c"
    "$TGI" serve -m "$MODEL" -t "$THREADS" --port $PORT 2>/dev/null &
    PID=$!
    wait_ready
    RES[tgi,$c]=$(run_level tgi "$c")
    stop
done

field() { python3 -c "import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print('-' if v is None else f'{v:.1f}' if isinstance(v,float) else v)" "$1" "$2"; }
echo "| concurrency | server | output tok/s | TTFT P50 ms | TTFT P99 ms | mean ITL ms | errors |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for c in $CONCURRENCY; do
    for s in llama tgi; do
        r=${RES[$s,$c]}
        echo "| $c | $s | $(field "$r" output_tokens_per_s) | $(field "$r" ttft_p50_ms) | $(field "$r" ttft_p99_ms) | $(field "$r" itl_mean_ms) | $(field "$r" error_count) |"
    done
    python3 -c "import json,sys; a,b=json.loads(sys.argv[1]),json.loads(sys.argv[2]); print(f'| $c | ratio tgi/llama | {b[\"output_tokens_per_s\"]/a[\"output_tokens_per_s\"]:.2f} | | {b[\"ttft_p99_ms\"]/a[\"ttft_p99_ms\"]:.2f} | | |')" "${RES[llama,$c]}" "${RES[tgi,$c]}"
done
