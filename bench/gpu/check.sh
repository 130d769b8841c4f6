#!/usr/bin/env bash
# The prepared GPU check (bench/gpu/README.md): correctness against the CPU, 32 concurrent streams, decode /
# prefill / `tgi bench` figures on a TinyLlama-1.1B-shaped random checkpoint, and transformers as the peer;
# results in $OUT (summary.md, results.json). Fits in 10 minutes (BUDGET seconds, default 480).
#
#   bash bench/gpu/check.sh                       # on the GPU machine, binaries from bench/gpu/build.sh
#   DEVICE=cpu SHAPE=small bash bench/gpu/check.sh    # the rehearsal on a CPU machine
#
# Environment: DEVICE (cuda), SHAPE (tinyllama | small), TGI and MAKE_CHECKPOINT (the binaries; default
# unpacked from target-cuda/release/carry/*.gz), OUT (default bench/out/gpu-check), BUDGET, PYTHON (python3; it runs the
# transformers peer too).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
DEVICE=${DEVICE:-cuda}
SHAPE=${SHAPE:-tinyllama}
OUT=${OUT:-$root/bench/out/gpu-check}
PYTHON=${PYTHON:-python3}
BUDGET=${BUDGET:-480}
# Without TGI / MAKE_CHECKPOINT: the gzipped binaries bench/gpu/build.sh leaves in target-cuda/release/carry/.
bin=/tmp/tgi-gpu-bin
mkdir -p "$bin"
for name in tgi make-checkpoint; do
    if [ -f "$root/target-cuda/release/carry/$name.gz" ]; then
        gzip -dc "$root/target-cuda/release/carry/$name.gz" >"$bin/$name"
        chmod +x "$bin/$name"
    fi
done
TGI=${TGI:-$bin/tgi}
MAKE_CHECKPOINT=${MAKE_CHECKPOINT:-$bin/make-checkpoint}

if [ "$DEVICE" != cpu ]; then
    # The CUDA libraries the binary links (cudart, cuBLAS, cuRAND, NVRTC of CUDA 13): PyTorch's wheels ship them.
    libs=$("$PYTHON" - <<'EOF'
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
dirs = {os.path.dirname(p) for r in roots for p in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so.*"), recursive=True)}
print(":".join(sorted(dirs)))
EOF
)
    export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if ldd "$TGI" | grep 'not found'; then
        echo "error: $TGI cannot find the libraries above (searched: $libs)" >&2
        exit 1
    fi
fi

case $SHAPE in
    tinyllama) shape_args=(--shape tinyllama-1.1b) ;;
    small) shape_args=(--shape tiny-2l --new-tokens 32 --prefill-words 100 --concurrency 1,8 --bench-seconds 3
        --peer-batches 1,4) ;;
    *) echo "error: SHAPE is tinyllama or small, not '$SHAPE'" >&2; exit 2 ;;
esac

mkdir -p "$OUT"
"$PYTHON" "$root/bench/gpu/check.py" --tgi "$TGI" --make-checkpoint "$MAKE_CHECKPOINT" --repo "$root" \
    --device "$DEVICE" --out "$OUT" --budget "$BUDGET" "${shape_args[@]}" 2>&1 | tee "$OUT/check.log"
