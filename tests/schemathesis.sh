#!/usr/bin/env bash
# Schemathesis against `tgi serve` on the bundled model, for a bounded time: fails on any 5xx, any
# response that does not match the served OpenAPI description (status, content type, headers, body),
# any schema-valid request refused and any schema-violating request accepted (less what a schema
# cannot state: tests/schemathesis/hooks.py).
#
#   cargo build --release && bash tests/schemathesis.sh
#
# Needs `schemathesis` (pip install -r tests/python/requirements.txt) on PATH or in $SCHEMATHESIS.
# MAX_EXAMPLES (default 400) bounds the cases per operation and MAX_TIME (seconds, default 150) the run;
# SEED fixes the generated data (with a fixed seed, make MAX_TIME large enough that MAX_EXAMPLES ends the
# run, so that every run sends the same requests); extra arguments go to `schemathesis run` (which runs in
# a scratch directory: give absolute paths).
set -euo pipefail
cd "$(dirname "$0")/.."

TGI=${TGI:-${CARGO_TARGET_DIR:-target}/release/tgi}
ST=${SCHEMATHESIS:-schemathesis}
MAX_TIME=${MAX_TIME:-150}
MAX_EXAMPLES=${MAX_EXAMPLES:-400}
[ -x "$TGI" ] || { echo "error: $TGI missing; run cargo build --release first" >&2; exit 2; }
ST=$(command -v "$ST") || { echo "error: schemathesis missing; pip install -r tests/python/requirements.txt" >&2; exit 2; }

work=$(mktemp -d)
server=
cleanup() {
    if [ -n "$server" ]; then
        kill "$server" 2>/dev/null || true
        wait "$server" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Any role, any content: the template itself refuses nothing.
printf '%s' '{% for m in messages %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}' >"$work/chat.jinja"

# Small token limits keep every generation short.
# Port 0: the kernel picks a free port, which the server's log names.
"$TGI" serve -m models/stories260k/hf --port 0 --chat-template "$work/chat.jinja" \
    --max-total-tokens 96 --max-input-tokens 64 --max-best-of 2 --max-n 2 --max-stop-sequences 2 \
    --max-top-n-tokens 3 --max-concurrent-requests 64 --payload-limit 1000000 \
    >"$work/server.log" 2>&1 &
server=$!
port=
for _ in $(seq 1500); do
    port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\).*|\1|p' "$work/server.log" | head -n1)
    [ -n "$port" ] && break
    kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; echo "error: tgi serve exited" >&2; exit 1; }
    sleep 0.2
done
[ -n "$port" ] || { cat "$work/server.log" >&2; echo "error: tgi serve did not start in 300 s" >&2; exit 1; }

# Run from the scratch directory: schemathesis keeps a cache in ./.schemathesis.
status=0
hooks=$PWD/tests/schemathesis
cd "$work"
PYTHONPATH=$hooks SCHEMATHESIS_HOOKS=hooks "$ST" run "http://127.0.0.1:$port/api-doc/openapi.json" \
    --checks all \
    --exclude-checks positive_data_acceptance,negative_data_rejection,use_after_free,ensure_resource_availability \
    --phases examples,coverage,fuzzing \
    --max-time "$MAX_TIME" --max-examples "$MAX_EXAMPLES" --workers 2 --request-timeout 30 \
    --suppress-health-check too_slow,filter_too_much \
    --generation-database none --no-color ${SEED:+--seed "$SEED"} "$@" || status=$?

if ! kill -0 "$server" 2>/dev/null; then
    echo "error: tgi serve died during the run" >&2
    tail -50 "$work/server.log" >&2
    status=1
fi
if grep -q "panicked" "$work/server.log"; then
    echo "error: tgi serve panicked" >&2
    grep -A5 "panicked" "$work/server.log" >&2
    status=1
fi
exit "$status"
