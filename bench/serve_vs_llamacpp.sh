#!/usr/bin/env bash
# Measures `tgi serve` against llama.cpp's llama-server on the same GGUF, in the same run, with `tgi bench`
# (streaming /v1/completions, synthetic prompts built with the model's own tokenizer, EOS ignored, THREADS threads
# each; both servers get as many parallel slots as clients, and the context they need). The workloads of the
# scheduler issue:
#
#   (a)  closed loop at CONCURRENCY clients, PROMPT-token prompts, GEN new tokens, REQUESTS_PER_CLIENT each;
#   (a') the same at APRIME_CONCURRENCY clients with APRIME_PROMPT / APRIME_GEN tokens, APRIME_PER each;
#   (b)  mixed: DECODERS streams (MIXED_PROMPT-token prompts, MIXED_GEN new tokens) decode while LONG prompts of
#        LONG_PROMPT tokens (LONG_GEN new tokens) arrive at LONG_RATE req/s (Poisson): the decoders' ITL shows
#        whether prefill stalls them, the long prompts' TTFT what the prefill policy costs them;
#   (c)  the published Gemma 3 270M GGUF (GEMMA) at GEMMA_CONCURRENCY clients, GEMMA_PROMPT-token prompts,
#        GEMMA_GEN new tokens, GEMMA_PER each.
#
# After each workload `tgi bench compare` prints the servers side by side and draws the charts (every server in
# each chart); at the end a table of the issue's targets (tgi / llama-server ratios).
#
# Usage: bench/serve_vs_llamacpp.sh LLAMA_BIN_DIR|- [MODEL.gguf]
#
#   LLAMA_BIN_DIR  directory with llama.cpp's llama-server (never built by this script); `-` measures tgi alone
#                  (a smoke run of the script without llama.cpp; TGI_BEFORE=$TGI gives it a second server to
#                  compare)
#   MODEL.gguf     default bench/out/tinyllama-q4_k_m.tgi.gguf (made by bench/engine_vs_llamacpp.sh)
#
# Environment: CONCURRENCY ("1,4,16"), REQUESTS_PER_CLIENT (2), THREADS (2), PROMPT (128), GEN (128),
# APRIME (1: run (a')), APRIME_CONCURRENCY (4), APRIME_PROMPT (64), APRIME_GEN (32), APRIME_PER (3),
# MIXED (1: run (b)), DECODERS (16), MIXED_PROMPT (32), MIXED_GEN (256), LONG (4), LONG_PROMPT (1024),
# LONG_GEN (16), LONG_RATE (0.2), GEMMA (the Gemma 3 270M Q4_K_M GGUF; default $TGI_GEMMA3_GGUF, see
# tests/gemma/fetch.sh; (c) is skipped without it), GEMMA_CONCURRENCY (8), GEMMA_PROMPT (512), GEMMA_GEN (128),
# GEMMA_PER (2), OUT (bench/out/serve-vs-llamacpp: one JSON report per server and workload, charts*/), TGI
# (default target/release/tgi), TGI_ARGS (extra `tgi serve` flags), TGI_BEFORE (an earlier tgi binary measured
# too, for before/after), SMOKE (1: every workload tiny, seconds each, to check the script end to end).
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 || "$1" == -h || "$1" == --help ]]; then
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 2
fi
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [[ $1 == - ]]; then LLAMA_BIN=; else LLAMA_BIN=$(cd "$1" && pwd); fi
MODEL=${2:-$ROOT/bench/out/tinyllama-q4_k_m.tgi.gguf}
if [[ ${SMOKE:-0} == 1 ]]; then
    : "${CONCURRENCY:=1,2}" "${REQUESTS_PER_CLIENT:=1}" "${PROMPT:=16}" "${GEN:=8}"
    : "${APRIME_CONCURRENCY:=2}" "${APRIME_PROMPT:=8}" "${APRIME_GEN:=4}" "${APRIME_PER:=1}"
    : "${DECODERS:=2}" "${MIXED_PROMPT:=8}" "${MIXED_GEN:=16}" "${LONG:=1}" "${LONG_PROMPT:=64}" "${LONG_GEN:=4}"
    : "${LONG_RATE:=2}" "${GEMMA_CONCURRENCY:=2}" "${GEMMA_PROMPT:=32}" "${GEMMA_GEN:=4}" "${GEMMA_PER:=1}"
fi
CONCURRENCY=${CONCURRENCY:-1,4,16}
PER=${REQUESTS_PER_CLIENT:-2}
THREADS=${THREADS:-2}
PROMPT=${PROMPT:-128}
GEN=${GEN:-128}
APRIME=${APRIME:-1}
APRIME_CONCURRENCY=${APRIME_CONCURRENCY:-4}
APRIME_PROMPT=${APRIME_PROMPT:-64}
APRIME_GEN=${APRIME_GEN:-32}
APRIME_PER=${APRIME_PER:-3}
MIXED=${MIXED:-1}
DECODERS=${DECODERS:-16}
MIXED_PROMPT=${MIXED_PROMPT:-32}
MIXED_GEN=${MIXED_GEN:-256}
LONG=${LONG:-4}
LONG_PROMPT=${LONG_PROMPT:-1024}
LONG_GEN=${LONG_GEN:-16}
LONG_RATE=${LONG_RATE:-0.2}
GEMMA=${GEMMA:-${TGI_GEMMA3_GGUF:-}}
GEMMA_CONCURRENCY=${GEMMA_CONCURRENCY:-8}
GEMMA_PROMPT=${GEMMA_PROMPT:-512}
GEMMA_GEN=${GEMMA_GEN:-128}
GEMMA_PER=${GEMMA_PER:-2}
OUT=${OUT:-$ROOT/bench/out/serve-vs-llamacpp}
TGI_ARGS=${TGI_ARGS:-}
TGI=${TGI:-${CARGO_TARGET_DIR:-$ROOT/target}/release/tgi}
if [[ -n $LLAMA_BIN ]]; then
    export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [[ -x $LLAMA_BIN/llama-server ]] || { echo "no llama-server in $LLAMA_BIN" >&2; exit 1; }
fi
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
        kill -0 "$PID" 2>/dev/null || { echo "the server exited before it was ready" >&2; exit 1; }
        sleep 0.5
    done
    echo "server did not come up" >&2; exit 1
}

# The servers measured, in order: llama-server (unless `-`), `tgi serve`, and with TGI_BEFORE an earlier tgi
# binary too (a before/after comparison in the same run).
SERVERS=()
[[ -n $LLAMA_BIN ]] && SERVERS+=(llama)
SERVERS+=(tgi)
[[ -n ${TGI_BEFORE:-} ]] && SERVERS+=(before)
# `tgi bench compare` of the reports OUT/PREFIX-SERVER.SUFFIX (it needs two servers at least).
compare() { # prefix suffix [compare flags]
    local prefix=$1 suffix=$2
    shift 2
    if ((${#SERVERS[@]} < 2)); then
        echo "(one server: nothing to compare; its reports are in $OUT)"
        return
    fi
    # shellcheck disable=SC2046
    "$TGI" bench compare $(printf "$OUT/$prefix-%s$suffix " "${SERVERS[@]}") "$@"
}
label_of() { case $1 in llama) echo llama-server ;; tgi) echo "tgi serve" ;; before) echo "tgi before" ;; esac; }
start_server() { # server model slots context (llama-server's -c: all slots together; tgi's -c is per sequence)
    log "$(label_of "$1") on $(basename "$2"), $3 slots"
    case $1 in
        llama)
            "$LLAMA_BIN/llama-server" -m "$2" -t "$THREADS" -np "$3" -c "$4" --port $PORT --no-webui \
                >/dev/null 2>&1 &
            ;;
        # shellcheck disable=SC2086
        tgi) "$TGI" serve -m "$2" -t "$THREADS" -np "$3" -c $(($4 / $3)) --port $PORT $TGI_ARGS 2>/dev/null & ;;
        # shellcheck disable=SC2086
        before) "$TGI_BEFORE" serve -m "$2" -t "$THREADS" -np "$3" -c $(($4 / $3)) --port $PORT $TGI_ARGS \
            2>/dev/null & ;;
    esac
    PID=$!
    wait_ready
}

# One closed-loop level: `tgi bench` with one level, so that llama-server can be restarted with as many slots as
# clients; the levels' reports are then joined into one report per server.
bench_level() { # label model prompt gen concurrency per report
    "$TGI" bench --url "http://127.0.0.1:$PORT" --api openai --label "$1" --ignore-eos --tokenizer "$2" \
        --input-tokens "$3" --output-tokens "$4" -c "$5" --requests $(($5 * $6)) --warmup 1 --quiet --timeout 600 \
        --json "$7" --force
}

# A closed-loop workload: every level of `concurrencies` against every server, one report per server
# (OUT/NAME-SERVER.json), then `tgi bench compare`.
closed() { # name model prompt gen concurrencies per
    local name=$1 model=$2 prompt=$3 gen=$4 per=$6 c srv
    echo "## workload $name: $prompt-token prompts, $gen new tokens, $per requests per client, $(basename "$model")"
    for c in ${5//,/ }; do
        for srv in "${SERVERS[@]}"; do
            start_server "$srv" "$model" "$c" $((c * (prompt + gen + 16)))
            bench_level "$(label_of "$srv")" "$model" "$prompt" "$gen" "$c" "$per" "$OUT/$name-$srv-c$c.json"
            stop
        done
    done
    for srv in "${SERVERS[@]}"; do
        python3 - "$OUT/$name-$srv.json" "$OUT/$name-$srv"-c*.json <<'PY'
import json, sys
reports = [json.load(open(p)) for p in sys.argv[2:]]
joined = dict(reports[0], runs=sorted((r for rep in reports for r in rep["runs"]), key=lambda r: r["concurrency"]))
json.dump(joined, open(sys.argv[1], "w"))
PY
    done
    compare "$name" .json --plot "$OUT/charts-$name"
}

closed a "$MODEL" "$PROMPT" "$GEN" "$CONCURRENCY" "$PER"
[[ $APRIME == 1 ]] && closed a1 "$MODEL" "$APRIME_PROMPT" "$APRIME_GEN" "$APRIME_CONCURRENCY" "$APRIME_PER"

if [[ $MIXED == 1 ]]; then
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
        start_server "$srv" "$MODEL" "$slots" $((slots * (LONG_PROMPT + LONG_GEN + MIXED_GEN + 16)))
        mixed "$(label_of "$srv")" "b-$srv"
        stop
    done
    echo "## workload b, the decoders ($DECODERS x $MIXED_PROMPT-token prompts, $MIXED_GEN new tokens)"
    compare b -decoders.json --plot "$OUT/charts-b-decoders"
    echo "## workload b, the long prompts ($LONG x $LONG_PROMPT tokens at $LONG_RATE req/s)"
    compare b -long.json
fi

if [[ -n $GEMMA && -f $GEMMA ]]; then
    closed c "$GEMMA" "$GEMMA_PROMPT" "$GEMMA_GEN" "$GEMMA_CONCURRENCY" "$GEMMA_PER"
else
    echo "## workload c skipped: no Gemma 3 270M GGUF (set GEMMA, or TGI_GEMMA3_GGUF after tests/gemma/fetch.sh)"
fi

# The issue's targets, tgi serve against llama-server (ratios; none without llama-server).
[[ -n $LLAMA_BIN ]] || exit 0
python3 - "$OUT" "$CONCURRENCY" "$APRIME_CONCURRENCY" "$GEMMA_CONCURRENCY" <<'PY'
import json, os, sys
out, conc, aprime_c, gemma_c = sys.argv[1], sys.argv[2].split(","), sys.argv[3], sys.argv[4]

def summary(report, c):
    """The summary of the level at concurrency `c` (any level when None) of OUT/REPORT.json, if measured."""
    path = os.path.join(out, report + ".json")
    if not os.path.exists(path):
        return None
    runs = json.load(open(path))["runs"]
    return next((r["summary"] for r in runs if c is None or str(r["concurrency"]) == str(c)), None)

def p99(measure):
    return lambda s: s[measure]["p99"]

def rate(s):
    return s["output_tokens_per_s"]

# (what, tgi's report, llama-server's report, level, figure, target as "<= x" or ">= x" or "")
checks = [("TTFT P99 (ms), (a) c=4", "a-tgi", "a-llama", 4, p99("ttft_ms"), "<= 1.0")]
checks += [(f"ITL P99 (ms), (a) c={c}", "a-tgi", "a-llama", c, p99("itl_ms"), "<= 1.0") for c in conc]
checks += [(f"ITL P99 (ms), (a') c={aprime_c}", "a1-tgi", "a1-llama", aprime_c, p99("itl_ms"), "<= 1.0")]
checks += [(f"output tok/s, (a) c={c}", "a-tgi", "a-llama", c, rate, ">= 1.0") for c in ("4", "16")]
checks += [("ITL P99 (ms), (b) decoders", "b-tgi-decoders", "b-llama-decoders", None, p99("itl_ms"), "<= 1.0"),
           ("TTFT P99 (ms), (b) long prompts", "b-tgi-long", "b-llama-long", None, p99("ttft_ms"), "<= 1.5")]
checks += [(f"{what}, (c) c={gemma_c}", "c-tgi", "c-llama", gemma_c, f, "")
           for what, f in [("output tok/s", rate), ("TTFT P99 (ms)", p99("ttft_ms")), ("ITL P99 (ms)", p99("itl_ms"))]]
print("## targets: tgi serve / llama-server")
print("| measure | llama-server | tgi serve | ratio | target | met |")
print("| --- | --- | --- | --- | --- | --- |")
for what, ours, theirs, c, figure, goal in checks:
    t, l = summary(ours, c), summary(theirs, c)
    if t is None or l is None:
        continue
    t, l = figure(t), figure(l)
    ratio = t / l if l else float("inf")
    met = "" if not goal else ("yes" if (ratio <= float(goal[3:]) if goal[0] == "<" else ratio >= float(goal[3:])) else "no")
    print(f"| {what} | {l:.1f} | {t:.1f} | {ratio:.2f} | {goal} | {met} |")
PY
