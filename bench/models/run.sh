#!/bin/sh
# bench/models/run.sh [--parts] [BUILD_DIR]: `sparkctl model push` against
# rsync over SSH (docs/models.md, "Measured"), side by side in one run.
#
# Default (root): for a simulated 4-node switch, then a 4-node ring (`sparkctl
# sim`, real sparkd in namespaces), fabric addresses applied (`topo addresses
# --apply`) and every fabric veth rate-limited with tc (tbf, BENCH_RATE_MBIT per
# twin and direction, default 1000), a generated model directory of
# BENCH_MIB MiB (default 2048; 8 shards and a config file) in /tmp:
#   - model push from node 1 to nodes 2-4 (one chain, both twins per hop);
#   - rsync -a over SSH (Debian's rsync + OpenSSH, sshd started in nodes 2-4
#     on port 2222, a key made here) from node 1 to each other node in turn,
#     then to all three in parallel, on the fabric address node 1 reaches
#     (on the ring node 3 is no neighbour of node 1: routed through node 2);
#   - one shard changed, model push again: the bytes it moved.
# Prints seconds, the rate each node got against the limit of its cable
# (2 twins; rsync's one TCP connection can use one twin) and the ratios.
# BENCH_TOPOS="switch ring" picks the clusters. Not part of CI: about 5 min
# at the default size on a 2-core machine; BENCH_MIB=256 for a quick run.
#
# --parts [BUILD_DIR] [MIB]: what the parts cost on one core (no root): SHA-256
# (and XXH3 with libxxhash-dev) per core, and a source and three relays in one
# process over loopback TLS (bench/models/relay_speed.c).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)

if [ "${1:-}" = --parts ]; then
	shift
	build=${1:-$top/build}
	mib=${2:-256}
	out=$(mktemp -d "${TMPDIR:-/tmp}/bench-models.XXXXXX")
	trap 'rm -rf "$out"' EXIT INT TERM
	xx=""
	[ -f /usr/include/xxhash.h ] && xx="-DHAVE_XXH3 -lxxhash"
	# shellcheck disable=SC2086
	cc -O2 "$here/hash_speed.c" -o "$out/hash_speed" -lcrypto $xx
	"$out/hash_speed" 1024
	ninja -C "$build" agent/libagentmodel.a common/libsparkcommon.a >/dev/null
	# shellcheck disable=SC2046
	cc -O2 -D_GNU_SOURCE -I"$top/agent" -I"$top/common" -I"$top" -I"$build" "$here/relay_speed.c" \
		"$build/agent/libagentmodel.a" "$build/common/libsparkcommon.a" \
		$(pkg-config --cflags --libs libuv jansson openssl yaml-0.1) -o "$out/relay_speed"
	"$out/relay_speed" "$mib" 4096
	exit 0
fi

case "${1:-}" in -h|--help) sed -n '2,25p' "$0"; exit 0 ;; esac
build=${1:-${SPARK_BUILD_DIR:-$top/build}}
case "$build" in /*) ;; *) build="$top/$build" ;; esac
mib=${BENCH_MIB:-2048}
rate=${BENCH_RATE_MBIT:-1000}
topos=${BENCH_TOPOS:-"switch ring"}
if [ "$(id -u)" != 0 ]; then
	echo "run.sh: needs root (sparkctl sim makes network namespaces); --parts does not" >&2
	exit 1
fi
for t in rsync ssh ssh-keygen tc python3; do
	command -v "$t" >/dev/null || { echo "run.sh: needs $t (apt-get install rsync openssh-server openssh-client iproute2)" >&2; exit 1; }
done
[ -x /usr/sbin/sshd ] || { echo "run.sh: needs /usr/sbin/sshd (apt-get install openssh-server)" >&2; exit 1; }
sparkctl=$build/cli/sparkctl
[ -x "$sparkctl" ] && [ -x "$build/agent/sparkd" ] ||
	{ echo "run.sh: no $sparkctl or sparkd: ninja -C $build cli/sparkctl agent/sparkd" >&2; exit 1; }

work=$(mktemp -d /tmp/bench-push.XXXXXX)
prefix="bmp$$"
made_run_sshd=""
cleanup() {
	for f in "$work"/sshd.*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
	done
	"$sparkctl" sim down --name "$prefix" >/dev/null 2>&1 || true
	[ -n "$made_run_sshd" ] && rmdir /run/sshd 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ ! -d /run/sshd ]; then
	mkdir -m 0755 /run/sshd
	made_run_sshd=1
fi

sx() { # K cmd...: run in node K
	k=$1
	shift
	"$sparkctl" sim exec "$prefix-$k" -- "$@"
}
now() { date +%s.%N; }
ifname() { # port twin
	case "$1$2" in
	00) echo enp1s0f0np0 ;; 01) echo enP2p1s0f0np0 ;;
	10) echo enp1s0f1np1 ;; 11) echo enP2p1s0f1np1 ;;
	esac
}
addr() { # K port twin: node K's IPv4 address on that netdev
	sx "$1" ip -4 -o addr show dev "$(ifname "$2" "$3")" | awk '{print $4}' | cut -d/ -f1 | head -n 1
}

# ---- the model and the keys -------------------------------------------------
src=$work/model
mkdir -p "$src"
echo '{"architectures": ["Bench"], "bench": true}' > "$src/config.json"
shard=$((mib / 8))
[ "$shard" -ge 1 ] || shard=1
i=1
while [ $i -le 8 ]; do
	head -c $((shard << 20)) /dev/urandom > "$src/model-0000$i-of-00008.safetensors"
	i=$((i + 1))
done
total=$(du -sb "$src" | cut -f1)
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/id"
cp "$work/id.pub" "$work/authorized_keys"
cat > "$work/sshd_config" <<EOF
Port 2222
ListenAddress 0.0.0.0
HostKey $work/host_key
AuthorizedKeysFile $work/authorized_keys
PermitRootLogin yes
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
EOF
sshopt="ssh -i $work/id -p 2222 -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"

results=$work/results
: > "$results"
row() { echo "$*" >> "$results"; } # topo what seconds bytes_per_node nodes limit_MBps

# ---- one cluster --------------------------------------------------------------
bench_topo() {
	topo=$1
	"$sparkctl" sim up --nodes 4 --topology "$topo" --name "$prefix" >/dev/null
	token=$(sx 1 "$sparkctl" init --name bench -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
	for k in 2 3 4; do
		sx "$k" "$sparkctl" join 169.254.100.1:7300 --token "$token" >/dev/null
	done
	sx 1 "$sparkctl" topo addresses --apply >/dev/null
	# tc on every fabric netdev of every node (and the switch's ports)
	for k in 1 2 3 4; do
		for p in 0 1; do
			for t in 0 1; do
				sx "$k" tc qdisc replace dev "$(ifname $p $t)" root tbf rate "${rate}mbit" \
					burst 1mb latency 100ms 2>/dev/null || true
			done
		done
	done
	if [ "$topo" = switch ]; then
		for d in $(ip netns exec "$prefix-switch" ls /sys/class/net | grep -v '^lo$'); do
			ip netns exec "$prefix-switch" tc qdisc replace dev "$d" root tbf rate "${rate}mbit" \
				burst 1mb latency 100ms 2>/dev/null || true
		done
	fi
	# where node 1 reaches each node on the fabric, for rsync
	if [ "$topo" = switch ]; then
		a2=$(addr 2 1 0); a3=$(addr 3 1 0); a4=$(addr 4 1 0)
	else
		# cable k: node k port 0 <-> node k+1 port 1
		a2=$(addr 2 1 0); a4=$(addr 4 0 0)
		a3=$(addr 3 1 0) # cable 2-3: node 3 through node 2
		n2in=$(addr 2 1 0); n2out=$(addr 2 0 0); n1=$(addr 1 0 0)
		sx 2 sysctl -qw net.ipv4.ip_forward=1
		sx 1 ip route replace "$a3/32" via "$n2in"
		sx 3 ip route replace "$n1/32" via "$n2out"
	fi
	for k in 2 3 4; do
		sx "$k" /usr/sbin/sshd -f "$work/sshd_config" -o "PidFile=$work/sshd.$k.pid"
	done
	sleep 0.3

	# model push, all three at once along the chain
	t0=$(now)
	sx 1 "$sparkctl" model push "$src" --group all --name bench -o json > "$work/push.json"
	t1=$(now)
	row "$topo push $(awk "BEGIN{print $t1 - $t0}") $total 3 $((2 * rate / 8))"
	python3 - "$work/push.json" >> "$work/notes" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%s: network %s, route %s, %s" % (sys.argv[1].split("/")[-1], d.get("network"),
      " ".join(r["name"].rsplit("-", 1)[-1] for r in d.get("route", [])),
      ", ".join("%s %s/%s chunks by link" % (n["name"].rsplit("-", 1)[-1],
                n["chunks_by_link"][0], n["chunks_by_link"][1]) for n in d["nodes"])))
PY
	# rsync to each node in turn, then to all three at once
	t0=$(now)
	for k in 2 3 4; do
		eval "a=\$a$k"
		sx 1 rsync -a -e "$sshopt" "$src/" "root@$a:$work/rsync-$topo-$k/"
	done
	t1=$(now)
	row "$topo rsync_in_turn $(awk "BEGIN{print $t1 - $t0}") $total 3 $((rate / 8))"
	rm -rf "$work"/rsync-"$topo"-*
	t0=$(now)
	pids=""
	for k in 2 3 4; do
		eval "a=\$a$k"
		sx 1 rsync -a -e "$sshopt" "$src/" "root@$a:$work/rsync-$topo-$k/" &
		pids="$pids $!"
	done
	for p in $pids; do wait "$p"; done
	t1=$(now)
	row "$topo rsync_parallel $(awk "BEGIN{print $t1 - $t0}") $total 3 $((rate / 8))"
	rm -rf "$work"/rsync-"$topo"-*
	# a new version of one shard: push again
	head -c $((shard << 20)) /dev/urandom > "$src/model-00005-of-00008.safetensors"
	t0=$(now)
	sx 1 "$sparkctl" model push "$src" --group all --name bench -o json > "$work/repush.json"
	t1=$(now)
	moved=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(max(n["bytes_written"] for n in d["nodes"]))' "$work/repush.json")
	row "$topo repush_one_shard $(awk "BEGIN{print $t1 - $t0}") $moved 3 $((2 * rate / 8))"
	for f in "$work"/sshd.*.pid; do
		[ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null || true
		rm -f "$f"
	done
	"$sparkctl" sim down --name "$prefix" >/dev/null
}

for t in $topos; do
	bench_topo "$t"
done

python3 - "$results" "$mib" "$rate" "$(nproc)" "$work/notes" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
mib, rate, ncpu = sys.argv[2], int(sys.argv[3]), sys.argv[4]
print("model push vs rsync over SSH: %s MiB model (8 shards), 4 simulated nodes, "
      "tc %d Mbit/s per twin, %s cores" % (mib, rate, ncpu))
print("%-7s %-17s %9s %12s %14s %11s" % ("cluster", "what", "seconds", "MB/node", "MB/s per node",
                                        "of the limit"))
by = {}
for topo, what, secs, nbytes, nodes, limit in rows:
    secs, nbytes, limit = float(secs), int(nbytes), int(limit)
    per = nbytes / 1e6 / secs
    by[(topo, what)] = secs
    if what == "rsync_parallel":
        # the busiest twin: node 1's on the switch carries all three copies; on
        # the ring its cable to node 2 carries node 2's and node 3's
        streams = 3 if topo == "switch" else 2
        note = "%.0f%% (%d copies on one twin)" % (100 * streams * per / limit, streams)
    else:
        note = "%.0f%% of %d MB/s" % (100 * per / limit, limit)
    print("%-7s %-17s %9.1f %12.0f %14.1f %s" % (topo, what, secs, nbytes / 1e6, per, note))
for topo in sorted({r[0] for r in rows}):
    p = by.get((topo, "push"))
    if p:
        print("%s: push %.1fx faster than rsync in turn, %.1fx faster than rsync in parallel"
              % (topo, by[(topo, "rsync_in_turn")] / p, by[(topo, "rsync_parallel")] / p))
print("limits: push uses both twins of a cable (%d MB/s), rsync one TCP connection (one twin, "
      "%d MB/s)" % (2 * rate // 8, rate // 8))
for l in open(sys.argv[5]):
    print(l.rstrip())
PY
