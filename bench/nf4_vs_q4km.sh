#!/usr/bin/env bash
# NF4 against Q4_K_M on the TinyLlama-1.1B shape, single sequence: decode tok/s (`tgi generate --json`, a 1-token
# prompt and 64 new tokens, 2 threads) and peak RSS (/usr/bin/time -v) of
#   - a Q4_K_M GGUF (`tgi quantize --type q4_k_m`),
#   - an NF4 checkpoint (`tgi quantize --format nf4`),
#   - in-situ `--quantize nf4` and `--quantize q4_k` of the F16 GGUF (quantized while loading).
# The CPU is shared, so the pair Q4_K_M / NF4 runs back to back REPS times and the ratios are per pair.
#
#   bench/nf4_vs_q4km.sh TGI Q4KM_GGUF NF4_DIR F16_GGUF [REPS]
set -euo pipefail
TGI=$1 Q4KM=$2 NF4=$3 F16=$4 REPS=${5:-3}
TIME=/usr/bin/time
OUT=$(mktemp)
trap 'rm -f "$OUT" "$OUT.t"' EXIT
run() { # prints "decode_tok_s peak_rss_mb load_s"
    "$TIME" -v -o "$OUT.t" "$TGI" generate -t 2 --temperature 0 --ignore-eos -n 64 --json "$@" "the" >"$OUT"
    python3 - "$OUT" "$OUT.t" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", open(sys.argv[2]).read()).group(1)) / 1024
wall = open(sys.argv[2]).read()
print(f"{d['timings']['decode_tokens_per_second']:.2f} {rss:.0f}")
PY
}
echo "| run | Q4_K_M decode | NF4 decode | NF4 / Q4_K_M | Q4_K_M peak RSS | NF4 peak RSS |"
echo "| --- | --- | --- | --- | --- | --- |"
for i in $(seq "$REPS"); do
    read -r dq rq < <(run -m "$Q4KM")
    read -r dn rn < <(run -m "$NF4")
    echo "| $i | $dq tok/s | $dn tok/s | $(python3 -c "print(f'{$dn/$dq:.2f}')") | $rq MB | $rn MB |"
done
echo
echo "| in-situ | decode | peak RSS | file it equals |"
echo "| --- | --- | --- | --- |"
read -r d r < <(run -m "$F16" --quantize nf4)
echo "| --quantize nf4 | $d tok/s | $r MB | $(du -m "$NF4/model.safetensors" | cut -f1) MB |"
read -r d r < <(run -m "$F16" --quantize q4_k)
echo "| --quantize q4_k | $d tok/s | $r MB | $(du -m "$Q4KM" | cut -f1) MB |"
