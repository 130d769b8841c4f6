#!/usr/bin/env bash
# Builds `tgi` with `--features cuda` on a machine without a CUDA install or a GPU.
#
#   bash bench/gpu/build.sh [CUDA_VENV]       # default CUDA_VENV: $HOME/.cache/tgi-cuda
#
# CUDA 13.0's compiler, headers and runtime libraries come from PyPI into a venv (reused when present); the
# 13.0 pin matters: PTX from a newer nvcc does not load on a CUDA 13.0 driver, and cudarc 0.19 refuses nvcc 13.5.
# The wheels ship only versioned shared objects and no libcuda (the driver's library), so the script adds the
# unversioned names the linker looks for and a link-time stub of libcuda.so.1 holding the driver API's names
# (from cudarc's bindings); at run time the binary loads the driver's real libcuda.so.1 and the CUDA libraries
# from LD_LIBRARY_PATH (see bench/gpu/README.md).
#
# Environment: CARGO_TARGET_DIR (default target-cuda), CUDA_COMPUTE_CAP (default 90: H100/H200),
# CARGO_BUILD_JOBS as usual. Writes the stripped binaries to $CARGO_TARGET_DIR/release/stripped/ and gzipped
# copies, what is carried to the GPU machine, to $CARGO_TARGET_DIR/release/carry/.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$HOME/.cache/tgi-cuda}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target-cuda}
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90}
export CUDARC_CUDA_VERSION=13000
# candle-kernels compiles its CUDA sources with cudaforge, on half the cores unless told: all of them here.
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}

packages=(
    'nvidia-cuda-nvcc==13.0.*' 'nvidia-cuda-cccl==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*'
    'nvidia-nvvm==13.0.*' 'nvidia-cuda-nvrtc==13.0.*' 'nvidia-cublas==13.0.*' 'nvidia-curand==10.4.*'
)
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# pip is quick when everything is already installed; it also repairs a half-installed venv. A failed download
# (about 1 GB of wheels on a fresh machine) is tried again, up to 5 times, 10 to 80 s apart.
for try in 1 2 3 4 5; do
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --retries 10 "${packages[@]}" && break
    [ "$try" = 5 ] && { echo "error: the CUDA wheels did not install" >&2; exit 1; }
    sleep $((10 << (try - 1)))
done

cuda_home=$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
lib=$cuda_home/lib
for name in cudart cublas cublasLt curand nvrtc; do
    versioned=$(cd "$lib" && ls "lib$name.so."* | grep -E "^lib$name\.so\.[0-9]+$" | head -n1)
    ln -sfn "$versioned" "$lib/lib$name.so"
done

# The link-time libcuda: every driver function cudarc binds, as an empty symbol, with the driver's soname.
stub=$lib/stubs/libcuda.so
if [ ! -f "$stub" ]; then
    cudarc_src=$(cd "$root" && cargo metadata --format-version 1 --locked --features cuda |
        "$venv/bin/python" -c 'import json, os, sys
print(next(os.path.dirname(p["manifest_path"]) for p in json.load(sys.stdin)["packages"] if p["name"] == "cudarc"))')
    mkdir -p "$lib/stubs"
    grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$cudarc_src/src/driver/sys/mod.rs" | sed 's/^pub unsafe fn //' |
        sort -u | sed 's/.*/void &(void) {}/' >"$lib/stubs/libcuda.c"
    cc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stub" "$lib/stubs/libcuda.c"
fi
ln -sfn libcuda.so "$lib/stubs/libcuda.so.1"  # for running the binary here (--help); never on a GPU machine

export CUDA_HOME=$cuda_home CUDA_PATH=$cuda_home PATH=$cuda_home/bin:$PATH
export LIBRARY_PATH=$lib:$lib/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}
nvcc --version | tail -n2
cd "$root"
cargo build --release --locked --features cuda --bin tgi
cargo build --release --locked -p tgi-make-checkpoint

out=$CARGO_TARGET_DIR/release/stripped
carry=$CARGO_TARGET_DIR/release/carry
mkdir -p "$out" "$carry"
for bin in tgi make-checkpoint; do
    strip -o "$out/$bin" "$CARGO_TARGET_DIR/release/$bin"
    gzip -6 -c "$out/$bin" >"$carry/$bin.gz"
    echo "$out/$bin: $(du -m "$out/$bin" | cut -f1) MiB ($carry/$bin.gz: $(du -m "$carry/$bin.gz" | cut -f1) MiB)"
done
# The GPU machine takes 64 MiB in all (the gzipped binaries travel; bench/gpu/check.sh unpacks them there).
if [ "$(du -cb "$carry"/*.gz | tail -n1 | cut -f1)" -ge $((64 << 20)) ]; then
    echo "error: the binaries in $carry are 64 MiB or more" >&2
    exit 1
fi
# It must start here too (on the libcuda stub, without a GPU).
LD_LIBRARY_PATH=$lib:$lib/stubs "$out/tgi" --help >/dev/null
echo "ok: $out/tgi --help runs"
