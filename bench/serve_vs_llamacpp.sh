#!/usr/bin/env bash
# Measures `tgi serve` against llama.cpp's llama-server on the same GGUF, in the same run, with `tgi bench`:
# closed-loop load at several concurrencies, streaming /v1/completions, synthetic prompts of PROMPT tokens
# (built with the model's own tokenizer), GEN new tokens with EOS ignored, THREADS threads each; llama-server gets
# as many parallel slots as the concurrency. Then `tgi bench compare` prints both side by side and draws the
# charts (both servers in each chart).
#
# Then (unless MIXED=0) the mixed workload: DECODERS streams (MIXED_PROMPT-token prompts, MIXED_GEN new tokens)
# decode while LONG prompts of LONG_PROMPT tokens (LONG_GEN new tokens) arrive at LONG_RATE req/s (Poisson): the
# decoders' ITL shows whether prefill stalls them, the long prompts' TTFT what the prefill bound costs them.
#
# Usage: bench/serve_vs_llamacpp.sh LLAMA_BIN_DIR [MODEL.gguf]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-server (never built by this script)
#   MODEL.gguf     default bench/out/tinyllama-q4_k_m.tgi.gguf (made by bench/engine_vs_llamacpp.sh)
#
# Environment: CONCURRENCY (default "1,4,16"), REQUESTS_PER_CLIENT (2), THREADS (2), PROMPT (128), GEN (128),
# OUT (bench/out/serve-vs-llamacpp: llama.json, tgi.json, charts/), TGI (default target/release/tgi), TGI_ARGS (extra
# `tgi serve` flags), TGI_BEFORE (an earlier tgi binary measured too, for before/after), MIXED (1), DECODERS (16), MIXED_PROMPT (32), MIXED_GEN (256), LONG (4), LONG_PROMPT (1024),
# LONG_GEN (16), LONG_RATE (0.2).
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
TGI_ARGS=${TGI_ARGS:-}
MIXED=${MIXED:-1}
DECODERS=${DECODERS:-16}
MIXED_PROMPT=${MIXED_PROMPT:-32}
MIXED_GEN=${MIXED_GEN:-256}
LONG=${LONG:-4}
LONG_PROMPT=${LONG_PROMPT:-1024}
LONG_GEN=${LONG_GEN:-16}
LONG_RATE=${LONG_RATE:-0.2}
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -x $LLAMA_BIN/llama-server ]] || { echo "no llama-server in $LLAMA_BIN" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "no model $MODEL (run bench/engine_vs_llamacpp.sh first)" >&2; exit 1; }
[[ -x $TGI ]] || (cd "$ROOT" && cargo build --release)
mkdir -p "$OUT"
log() { echo "[$(date +%T)] $*" >&2; }
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); flags: $(grep -o -w \
    'avx2\|avx512f\|avx512bw\|avx512vl\|avx512_vnni\|avx_vnni\|avx512_bf16' /proc/cpuinfo | sort -u | xargs); $THREADS threads"
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
        --input-tokens "$PROMPT" --output-tokens "$GEN" -c "$2" --requests $(($2 * PER)) --warmup 1 --quiet \
        --json "$3" --force
}

# The servers measured, in order: llama-server, `tgi serve`, and with TGI_BEFORE an earlier tgi binary too (a
# before/after comparison in the same run).
SERVERS=(llama tgi)
[[ -n ${TGI_BEFORE:-} ]] && SERVERS+=(before)
label_of() { case $1 in llama) echo llama-server ;; tgi) echo "tgi serve" ;; before) echo "tgi before" ;; esac; }
start_server() { # server slots context
    log "$(label_of "$1"), $2 slots"
    case $1 in
        llama)
            "$LLAMA_BIN/llama-server" -m "$MODEL" -t "$THREADS" -np "$2" -c "$3" --port $PORT --no-webui \
                >/dev/null 2>&1 &
            ;;
        # shellcheck disable=SC2086
        tgi) "$TGI" serve -m "$MODEL" -t "$THREADS" --port $PORT $TGI_ARGS 2>/dev/null & ;;
        # shellcheck disable=SC2086
        before) "$TGI_BEFORE" serve -m "$MODEL" -t "$THREADS" --port $PORT $TGI_ARGS 2>/dev/null & ;;
    esac
    PID=$!
    wait_ready
}

for c in ${CONCURRENCY//,/ }; do
    for srv in "${SERVERS[@]}"; do
        start_server "$srv" "$c" $((c * (PROMPT + GEN + 16)))
        bench_level "$(label_of "$srv")" "$c" "$OUT/$srv-c$c.json"
        stop
    done
done

join() { # server-prefix -> one report with every level's run
    python3 - "$OUT/$1.json" "$OUT"/"$1"-c*.json <<'PY'
import json, sys
reports = [json.load(open(p)) for p in sys.argv[2:]]
joined = dict(reports[0], runs=sorted((r for rep in reports for r in rep["runs"]), key=lambda r: r["concurrency"]))
json.dump(joined, open(sys.argv[1], "w"))
PY
}
for srv in "${SERVERS[@]}"; do join "$srv"; done
# shellcheck disable=SC2046
"$TGI" bench compare $(printf "$OUT/%s.json " "${SERVERS[@]}") --plot "$OUT/charts"

[[ $MIXED == 1 ]] || exit 0
# The mixed workload: the decoders (closed loop, one request each) and the long prompts (open loop) at once.
mixed() { # label prefix
    "$TGI" bench --url "http://127.0.0.1:$PORT" --api openai --label "$1 long prompts" --ignore-eos \
        --tokenizer "$MODEL" --input-tokens "$LONG_PROMPT" --output-tokens "$LONG_GEN" --rate "$LONG_RATE" \
        --requests "$LONG" --timeout 600 --quiet --json "$OUT/$2-long.json" --force &
    local long=$!
    "$TGI" bench --url "http://127.0.0.1:$PORT" --api openai --label "$1 decoders" --ignore-eos \
        --tokenizer "$MODEL" --input-tokens "$MIXED_PROMPT" --output-tokens "$MIXED_GEN" -c "$DECODERS" \
        --requests "$DECODERS" --timeout 600 --quiet --json "$OUT/$2-decoders.json" --force
    wait "$long"
}
slots=$((DECODERS + LONG))
for srv in "${SERVERS[@]}"; do
    start_server "$srv" "$slots" $((slots * (LONG_PROMPT + LONG_GEN + MIXED_GEN + 16)))
    mixed "$(label_of "$srv")" "$srv-mixed"
    stop
done
echo "## mixed workload: the decoders ($DECODERS x $MIXED_PROMPT-token prompts, $MIXED_GEN new tokens)"
# shellcheck disable=SC2046
"$TGI" bench compare $(printf "$OUT/%s-mixed-decoders.json " "${SERVERS[@]}") --plot "$OUT/charts-mixed-decoders"
echo "## mixed workload: the long prompts ($LONG x $LONG_PROMPT tokens at $LONG_RATE req/s)"
# shellcheck disable=SC2046
"$TGI" bench compare $(printf "$OUT/%s-mixed-long.json " "${SERVERS[@]}")
