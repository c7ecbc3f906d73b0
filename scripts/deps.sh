#!/usr/bin/env bash
# Install what sparkctl needs to build and test on Debian 12 (or Ubuntu 24.04),
# with apt, only when something is missing. Run as root.
set -euo pipefail

BUILD_PKGS="gcc meson ninja-build pkg-config libuv1-dev libsqlite3-dev libssl-dev
 libjansson-dev libyaml-dev libssh-dev libnl-3-dev libnl-route-3-dev libibverbs-dev
 libcriterion-dev libopenblas-dev libmicrohttpd-dev libcurl4-openssl-dev libpcre2-dev iproute2 python3"
TEST_PKGS="clang libclang-rt-14-dev valgrind openssh-server openmpi-bin libopenmpi-dev
 python3-numpy python3-torch netplan.io
 gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static debhelper lintian debootstrap
 fakeroot file slurm-wlm munge prometheus nodejs curl openssl iputils-ping"

want="$BUILD_PKGS"
case "${1:-}" in
  --test) want="$BUILD_PKGS $TEST_PKGS" ;;
  ""|--build) ;;
  *) echo "usage: $0 [--build|--test]" >&2; exit 2 ;;
esac

missing=()
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing packages: ${missing[*]}; run this script as root to install them" >&2
  exit 1
fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
