#!/usr/bin/env bash
# The sparkctl demo: build, bring up a simulated 4-node DGX Spark ring (one
# network namespace per node, netdevs named like a Spark's, veth "cables", a
# real sparkd in each), form a cluster with a join token, show its status, and
# tear it all down. Run as root on Debian 12; installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh --build
B=${SPARK_DEMO_BUILD:-build-demo}
[ -f "$B/build.ninja" ] || meson setup "$B" -Dtests=disabled >/dev/null
ninja -C "$B" >/dev/null
export PATH=$PWD/$B/cli:$PWD/$B/agent:$PATH
SIM=demo$$
cleanup() { sparkctl sim down --name "$SIM" >/dev/null 2>&1 || true; }
trap cleanup EXIT

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
on() { local n=$1; shift; sparkctl sim exec "$SIM-$n" -- sparkctl "$@"; }

say "sparkctl sim up --nodes 4 --topology ring --name $SIM"
sparkctl sim up --nodes 4 --topology ring --name "$SIM"
say "sparkctl sim ls --name $SIM --links"
sparkctl sim ls --name "$SIM" --links
say "sparkctl init --name demo                      # on $SIM-1"
on 1 init --name demo
TOKEN=$(on 1 token create --ttl 10m -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
for n in 2 3 4; do
  say "sparkctl join 169.254.100.1:7300 --token \$TOKEN   # on $SIM-$n"
  on $n join 169.254.100.1:7300 --token "$TOKEN"
done
say "sparkctl status                                # on $SIM-3"
on 3 status
say "sparkctl sim fault kill $SIM-4; sleep 6; sparkctl status"
sparkctl sim fault kill "$SIM-4" >/dev/null
sleep 6
on 1 status
say "sparkctl sim fault start $SIM-4; sleep 2; sparkctl status"
sparkctl sim fault start "$SIM-4" >/dev/null
sleep 2
on 1 status
say "sparkctl sim down --name $SIM"
sparkctl sim down --name "$SIM"
trap - EXIT
