#!/usr/bin/env bash
# The sparkctl demo: build, bring up a simulated 4-node DGX Spark ring (one
# network namespace per node, netdevs named like a Spark's, veth "cables", a
# real sparkd in each), form a cluster with a join token, show its status, and
# tear it all down. Run as root on Debian 12 (directly or with sudo); it
# installs what each part needs (build packages; python3-torch for the
# torchrun part, Open MPI for the MPI part), or says which part it skips and why.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "demo.sh: needs root (network namespaces): run it as root, or with sudo ./scripts/demo.sh" >&2
  exit 1
fi
./scripts/deps.sh --build
# need PART PKG...: install the Debian packages a part of the demo needs; 1
# (after saying why) when they cannot be had, and the part is skipped.
need() {
  local part=$1 p missing=(); shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ -n "${SPARK_DEMO_NO_INSTALL:-}" ] || ! command -v apt-get >/dev/null; then
    echo "demo.sh: skipping the $part part: ${missing[*]} not installed (apt-get install ${missing[*]})" >&2
    return 1
  fi
  echo "demo.sh: installing ${missing[*]} for the $part part" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 &&
     ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "demo.sh: skipping the $part part: apt-get could not install ${missing[*]}" >&2
    return 1
  fi
}
# what the torchrun and Open MPI parts need, before the sim is up
TORCH=0; MPI=0
if need torchrun python3-torch; then
  if [ -x /usr/bin/torchrun ]; then TORCH=1; else echo "demo.sh: skipping the torchrun part: python3-torch has no /usr/bin/torchrun" >&2; fi
fi
if need "Open MPI" openmpi-bin libopenmpi-dev; then
  if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then MPI=1; else echo "demo.sh: skipping the Open MPI part: no mpicc/mpirun on PATH" >&2; fi
fi
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
say "sparkctl topo validate --expect ring             # on $SIM-1"
on 1 topo validate --expect ring
say "sparkctl topo show"
on 1 topo show
say "sparkctl sim fault kill $SIM-4; sleep 6; sparkctl status"
sparkctl sim fault kill "$SIM-4" >/dev/null
sleep 6
on 1 status
say "sparkctl sim fault start $SIM-4; sleep 2; sparkctl status"
sparkctl sim fault start "$SIM-4" >/dev/null
sleep 2
on 1 status
# Groups and jobs (issue 6): two groups of neighbours, a torchrun job on one and
# an Open MPI job on the other, each rank with its own node's environment.
say "sparkctl group create train --size 2; sparkctl group create serve --size 2"
on 1 group create train --size 2
on 1 group create serve --size 2
on 2 group ls
JOBDIR=$(mktemp -d /tmp/sparkctl-demo-XXXXXX); chmod 755 "$JOBDIR"
if [ $TORCH = 1 ]; then
  cat > "$JOBDIR/allreduce.py" <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {dist.get_rank()} of {dist.get_world_size()}: all_reduce = {t.item()}")
PY
  say "sparkctl run --group train --launcher torchrun -- allreduce.py"
  on 3 run --group train --launcher torchrun --env PATH=/usr/sbin:/usr/bin:/sbin:/bin -- "$JOBDIR/allreduce.py"
fi
if [ $MPI = 1 ]; then
  cat > "$JOBDIR/hello.c" <<'C'
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int c, char **v) { int r, n, x, s; MPI_Init(&c, &v);
  MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n); x = r + 1;
  MPI_Allreduce(&x, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  printf("MPI rank %d of %d on %s: sum = %d\n", r, n, getenv("SPARK_NODE"), s);
  MPI_Finalize(); return 0; }
C
  mpicc -o "$JOBDIR/hello" "$JOBDIR/hello.c"
  # simulated nodes share one host name and /dev/shm: keep Open MPI off shared memory
  say "sparkctl run --group serve --launcher mpi --ranks-per-node 2 --env OMPI_MCA_btl=self,tcp -- hello"
  on 4 run --group serve --launcher mpi --ranks-per-node 2 --env OMPI_MCA_btl=self,tcp -- "$JOBDIR/hello"
fi
say "sparkctl run --group all -- sh -c 'echo \$GLOO_SOCKET_IFNAME \$SPARK_FABRIC_NETDEVS'"
on 1 run --group all -- sh -c 'echo $SPARK_NODE: GLOO_SOCKET_IFNAME=$GLOO_SOCKET_IFNAME SPARK_FABRIC_NETDEVS=$SPARK_FABRIC_NETDEVS'
say "sparkctl job ls"
on 1 job ls
rm -rf "$JOBDIR"
say "sparkctl sim down --name $SIM"
sparkctl sim down --name "$SIM"
trap - EXIT
