#!/usr/bin/env bash
# AWQ against Q4_K_M on the TinyLlama-1.1B shape, single sequence: decode tok/s (`tgi generate --json`, a 1-token
# prompt and 64 new tokens, 2 threads) and peak RSS (/usr/bin/time -v) of
#   - a Q4_K_M GGUF (`tgi quantize --type q4_k_m`),
#   - an AWQ GEMM checkpoint (group 128, zero point; e.g. `tgi quantize --format awq --method rtn`, or
#     `TGI_AWQ_SRC=HF_DIR TGI_AWQ_OUT=AWQ_DIR cargo test --release -p tgi-engines --test awq -- --ignored`).
# The CPU is shared, so each Q4_K_M / AWQ pair runs back to back, REPS times; ratios are per pair.
#
#   bench/awq_vs_q4km.sh TGI Q4KM_GGUF AWQ_DIR [REPS]
set -euo pipefail
TGI=$1 Q4KM=$2 AWQ=$3 REPS=${4:-5}
OUT=$(mktemp)
trap 'rm -f "$OUT" "$OUT.t"' EXIT
run() { # prints "decode_tok_s peak_rss_mb"
    /usr/bin/time -v -o "$OUT.t" "$TGI" generate -t 2 --temperature 0 --ignore-eos -n 64 --json "$@" "the" >"$OUT"
    python3 - "$OUT" "$OUT.t" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[2]).read()).group(1)) / 1024
print(f"{d['timings']['decode_tokens_per_second']:.2f} {rss:.0f}")
PY
}
size=$(du -cm "$AWQ"/*.safetensors | tail -1 | cut -f1)
echo "| run | Q4_K_M decode | AWQ decode | AWQ / Q4_K_M | peak RSS Q4_K_M / AWQ | AWQ RSS / file ($size MB) |"
echo "| --- | --- | --- | --- | --- | --- |"
for i in $(seq "$REPS"); do
    read -r dq rq < <(run -m "$Q4KM")
    read -r da ra < <(run -m "$AWQ")
    echo "| $i | $dq tok/s | $da tok/s | $(python3 -c "print(f'{$da/$dq:.2f}')") | $rq / $ra MB | $(python3 -c "print(f'{$ra/$size:.2f}')") |"
done
