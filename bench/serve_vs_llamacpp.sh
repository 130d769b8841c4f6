#!/usr/bin/env bash
# Measures `tgi serve` against llama.cpp's llama-server on the same GGUF, in the same run, with `tgi bench`:
# closed-loop load at several concurrencies, streaming /v1/completions, synthetic prompts of PROMPT tokens
# (built with the model's own tokenizer), GEN new tokens with EOS ignored, THREADS threads each; llama-server gets
# as many parallel slots as the concurrency. Then `tgi bench compare` prints both side by side and draws the
# charts (both servers in each chart).
#
# Usage: bench/serve_vs_llamacpp.sh LLAMA_BIN_DIR [MODEL.gguf]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-server (never built by this script)
#   MODEL.gguf     default bench/out/tinyllama-q4_k_m.tgi.gguf (made by bench/engine_vs_llamacpp.sh)
#
# Environment: CONCURRENCY (default "1,4,16"), REQUESTS_PER_CLIENT (2), THREADS (2), PROMPT (128), GEN (128),
# OUT (bench/out/serve-vs-llamacpp: llama.json, tgi.json, charts/), TGI (default target/release/tgi).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LLAMA_BIN=$(cd "$1" && pwd)
MODEL=${2:-$ROOT/bench/out/tinyllama-q4_k_m.tgi.gguf}
CONCURRENCY=${CONCURRENCY:-1,4,16}
PER=${REQUESTS_PER_CLIENT:-2}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-128}
OUT=${OUT:-$ROOT/bench/out/serve-vs-llamacpp}
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -x $LLAMA_BIN/llama-server ]] || { echo "no llama-server in $LLAMA_BIN" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "no model $MODEL (run bench/engine_vs_llamacpp.sh first)" >&2; exit 1; }
[[ -x $TGI ]] || (cd "$ROOT" && cargo build --release)
mkdir -p "$OUT"
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

# One `tgi bench` per level, so that llama-server can be restarted with as many slots as clients; the levels'
# reports are then joined into one report per server.
bench_level() { # label concurrency report
    "$TGI" bench --url "http://127.0.0.1:$PORT" --api openai --label "$1" --ignore-eos --tokenizer "$MODEL" \
        --input-tokens "$PROMPT" --output-tokens "$GEN" -c "$2" -n $(($2 * PER)) --warmup 1 --quiet \
        --json "$3" --force
}

for c in ${CONCURRENCY//,/ }; do
    log "llama-server, $c slots"
    "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$c" -c $((c * (PROMPT + GEN + 16))) --port $PORT \
        --no-webui >/dev/null 2>&1 &
    PID=$!
    wait_ready
    bench_level llama-server "$c" "$OUT/llama-c$c.json"
    stop
    log "tgi serve, concurrency $c"
    "$TGI" serve -m "$MODEL" -t "$THREADS" --port $PORT 2>/dev/null &
    PID=$!
    wait_ready
    bench_level "tgi serve" "$c" "$OUT/tgi-c$c.json"
    stop
done

join() { # server-prefix -> one report with every level's run
    python3 - "$OUT/$1.json" "$OUT"/"$1"-c*.json <<'PY'
import json, sys
reports = [json.load(open(p)) for p in sys.argv[2:]]
joined = dict(reports[0], runs=sorted((r for rep in reports for r in rep["runs"]), key=lambda r: r["concurrency"]))
json.dump(joined, open(sys.argv[1], "w"))
PY
}
join llama
join tgi
"$TGI" bench compare "$OUT/llama.json" "$OUT/tgi.json" --plot "$OUT/charts"
