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
# The image's environment, with the address a chroot on this host can reach and port 0: the kernel picks
# a free port, which the server's log names.
# The log exists before the server starts: a loaded machine may not run the background job's redirection
# before the first read below.
: >"$work/serve.log"
env -i $(inspect '{{range .Config.Env}}{{.}} {{end}}') TGI_HOSTNAME=127.0.0.1 TGI_PORT=0 \
    chroot --userspec=65532:65532 "$work/fs" /usr/local/bin/tgi serve 2>>"$work/serve.log" &
pid=$!
fail() { echo "$1:" >&2; cat "$work/serve.log" >&2; exit 1; }
port=
deadline=$((SECONDS + 300))
while [ -z "$port" ]; do
    kill -0 "$pid" 2>/dev/null || fail "tgi serve from the image's filesystem exited"
    [ "$SECONDS" -lt "$deadline" ] || fail "tgi serve from the image's filesystem did not start in 300 s"
    sleep 0.2
    port=$(sed -n 's|.*listening on http://[^ ]*:\([0-9][0-9]*\).*|\1|p' "$work/serve.log" | head -n1)
done
deadline=$((SECONDS + 120))
until curl -sf --max-time 5 "http://127.0.0.1:$port/health" >/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "tgi serve from the image's filesystem did not answer /health in 120 s"
    sleep 0.2
done
answer=$(curl -sf "http://127.0.0.1:$port/generate" -H 'Content-Type: application/json' \
    -d '{"inputs": "Once upon a time", "parameters": {"max_new_tokens": 5}}') \
    || fail "tgi serve from the image's filesystem did not answer"
echo "served from the image's filesystem as 65532: $answer"
kill -TERM "$pid"
wait "$pid"
pid=
echo "image ok"
