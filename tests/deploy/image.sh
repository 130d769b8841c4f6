#!/usr/bin/env bash
# The container image (the CI test): builds deploy/container/Containerfile's `runtime` stage with
# podman FROM scratch around an already-built tgi binary (ROOTFS=prebuilt: nothing is pulled and
# nothing recompiled), inspects it (entrypoint, user, exposed port, size), then, since running
# containers fails on cgroups on these machines, unpacks the image's filesystem (podman create +
# export) and runs `tgi serve` from it in a chroot as the image's user: the binary, its libraries
# and the bundled model work with nothing else there.
#
# Usage: tests/deploy/image.sh TGI_BINARY
# Prints `skipped: REASON` (exit 0) when podman or root is missing, `image ok` on success.
set -euo pipefail
bin=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
missing=()
command -v podman >/dev/null || missing+=(podman)
command -v strip >/dev/null || missing+=(strip)
[ "$(id -u)" = 0 ] || missing+=("root (for chroot)")
if [ ${#missing[@]} -gt 0 ]; then
    echo "skipped: missing ${missing[*]}"
    exit 0
fi
work=$(mktemp -d)
tag="localhost/tgi-ci-$$:test"
cleanup() {
    [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true
    [ -n "${cid:-}" ] && podman rm "$cid" >/dev/null 2>&1 || true
    podman rmi "$tag" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

"$root/deploy/container/rootfs.sh" "$bin" "$work/ctx/rootfs"
podman build -q -f "$root/deploy/container/Containerfile" --build-arg ROOTFS=prebuilt --target runtime \
    -t "$tag" "$work/ctx" >/dev/null
inspect() { podman image inspect "$tag" --format "$1"; }
user=$(inspect '{{.Config.User}}')
entrypoint=$(inspect '{{json .Config.Entrypoint}}')
ports=$(inspect '{{range $p, $_ := .Config.ExposedPorts}}{{$p}} {{end}}')
size=$(inspect '{{.Size}}')
echo "image: user $user, entrypoint $entrypoint, ports $ports, $((size / 1000000)) MB"
[ "$user" = "65532:65532" ] || { echo "the image must run as 65532:65532, not '$user'" >&2; exit 1; }
[ "$entrypoint" = '["/usr/local/bin/tgi","serve"]' ] || { echo "unexpected entrypoint $entrypoint" >&2; exit 1; }
[ "$ports" = "3000/tcp " ] || { echo "unexpected exposed ports '$ports'" >&2; exit 1; }
[ "$size" -lt 60000000 ] || { echo "the image is $size bytes, more than 60 MB" >&2; exit 1; }

cid=$(podman create "$tag")
mkdir "$work/fs"
podman export "$cid" | tar -x -C "$work/fs"
files=$(cd "$work/fs" && find . -type f | sort | tr '\n' ' ')
echo "files: $files"
[ ! -e "$work/fs/bin/sh" ] || { echo "the image has a shell" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The image's environment, with the address a chroot on this host can reach.
env -i $(inspect '{{range .Config.Env}}{{.}} {{end}}') TGI_HOSTNAME=127.0.0.1 TGI_PORT="$port" \
    chroot --userspec=65532:65532 "$work/fs" /usr/local/bin/tgi serve 2>"$work/serve.log" &
pid=$!
for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.1
done
answer=$(curl -sf "http://127.0.0.1:$port/generate" -H 'Content-Type: application/json' \
    -d '{"inputs": "Once upon a time", "parameters": {"max_new_tokens": 5}}') \
    || { echo "tgi serve from the image's filesystem did not answer:" >&2; cat "$work/serve.log" >&2; exit 1; }
echo "served from the image's filesystem as 65532: $answer"
kill -TERM "$pid"
wait "$pid"
pid=
echo "image ok"
