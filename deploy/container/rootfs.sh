#!/bin/sh
# Lays out the container image's whole filesystem under OUT: the tgi binary (stripped) at
# /usr/local/bin/tgi, the shared libraries it loads (from ldd) at their own paths, a world-writable
# /tmp (the bundled demo model is written there), /data for the model cache, and passwd/group
# entries for the unprivileged user 65532 the image runs as. Nothing else: no shell, no package
# manager. Used by the Containerfile's build stage and, from a binary built outside, by the CI test.
#
# Usage: deploy/container/rootfs.sh BINARY OUT
set -eu
bin=$1
out=$2
rm -rf "$out"
mkdir -p "$out/usr/local/bin" "$out/etc" "$out/tmp" "$out/data"
chmod 1777 "$out/tmp"
chmod 0777 "$out/data"
strip -o "$out/usr/local/bin/tgi" "$bin"
# Each resolved library (`name => /path (addr)`) and the loader (`/lib64/ld-linux-x86-64.so.2 (addr)`).
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | while read -r lib; do
    mkdir -p "$out$(dirname "$lib")"
    cp -L "$lib" "$out$lib"
done
echo 'tgi:x:65532:65532:tgi:/data:/sbin/nologin' > "$out/etc/passwd"
echo 'tgi:x:65532:' > "$out/etc/group"
