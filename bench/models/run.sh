#!/bin/sh
# bench/models/run.sh BUILD_DIR [MIB]: what model push's parts cost on this
# machine (docs/models.md): the chunk hashes per core (SHA-256, and XXH3 when
# Debian's libxxhash-dev is installed) and the data plane (a source and three
# relays in one process, one core, TLS over loopback). The issue's benchmark
# against rsync over SSH in a rate-limited simulated cluster is not written yet.
set -eu
build=${1:?usage: $0 BUILD_DIR [MIB]}
mib=${2:-256}
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/bench-models.XXXXXX")
trap 'rm -rf "$out"' EXIT INT TERM
xx=""
[ -f /usr/include/xxhash.h ] && xx="-DHAVE_XXH3 -lxxhash"
# shellcheck disable=SC2086
cc -O2 "$here/hash_speed.c" -o "$out/hash_speed" -lcrypto $xx
"$out/hash_speed" 1024
ninja -C "$build" agent/libagentmodel.a common/libsparkcommon.a >/dev/null
cc -O2 -D_GNU_SOURCE -I"$src/agent" -I"$src/common" -I"$src" -I"$build" "$here/relay_speed.c" \
  "$build/agent/libagentmodel.a" "$build/common/libsparkcommon.a" \
  $(pkg-config --cflags --libs libuv jansson openssl yaml-0.1) -o "$out/relay_speed"
"$out/relay_speed" "$mib" 4096
