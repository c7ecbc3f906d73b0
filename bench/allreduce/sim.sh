#!/bin/sh
# All-reduce side by side across the nodes of simulated clusters (`sparkctl
# sim`, needs root): spark-bench (auto, one-shot, relay, doubling, ring) against Open MPI and
# Gloo (ring, halving-doubling) on a 4-node ring and a 4-node switch, at 2 and
# 4 ranks (rank r on node r+1), one table per cluster with ratios.
#
#   bench/allreduce/sim.sh [--topologies "ring switch"] [--ranks "2 4"]
#        [--sizes LIST] [--iters N] [--rounds R] [--iter-bytes B]
#        [--build DIR] [--out FILE] [--results FILE]
#
# --results FILE appends the JSON lines to FILE and prints no table (run.sh
# --sim does that, then prints every table). MPI_BENCH / GLOO_BENCH name
# already-built peer programs (else they are built here). The sim (prefix
# ars<pid>) is removed on exit, Ctrl-C and TERM; after a SIGKILL:
# `sparkctl sim down --name ars<pid>`.
#
# Network (all inside the sim's namespaces, gone with `sim down`):
#  ring:   one 169.254.S.0/24 per twin per cable (S = 10 + 2(cable-1) + twin,
#          cable c = node c port 0 to node c+1 port 1), host = node index, and
#          in each node an `unreachable` route to the subnets of the cables it
#          does not have (the sim's management net, 169.254.0.0/16 on enP7s7,
#          would otherwise carry them). spark-bench runs so, as on a real ring:
#          its self-test finds the non-neighbours unreachable, turns one-shot
#          off and auto uses relay (neighbours only; at 4 ranks recursive
#          doubling, whose partners are neighbours there, if its calibration
#          found that faster) for small calls, ring above.
#          Open MPI and Gloo need every pair connected, so for them those
#          routes become routes via the neighbour on that cable, with IP
#          forwarding on (the only way they run on a physical ring).
#  switch: port 1 on the sim's bridge; twin 0 of every node in 169.254.20.0/24,
#          twin 1 in 169.254.21.0/24. Everything runs over twin 0.
# Open MPI: mpirun in node 1, hosts = management addresses 169.254.100.K,
# plm_rsh_agent = a wrapper running `sparkctl sim exec` through a shell, oob
# over the management net, btl tcp over the twin-0 fabric netdevs.
# The ranks share this machine's cores but each library sees one rank per
# "host", so none notices it is oversubscribed. Both get the rule
# libsparkcoll applies by itself on loopback: with more ranks than cores, do not spin
# (spark-bench: SPARK_COLL_SPIN_US=0 SPARK_COLL_SPIN_YIELD=1; Open MPI:
# mpi_yield_when_idle 1). A spinning rank sharing a core with another job
# costs milliseconds per call. Gloo always sleeps in its loop thread.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
topos="ring switch"
ranks="2 4"
sizes="8,64,512,4K,16K,64K,256K,1M,4M,16M"
iters=200
rounds=2
iter_bytes=$((64 << 20))
build="${SPARK_BUILD_DIR:-$top/build}"
out=""
results=""
while [ $# -gt 0 ]; do
	case "$1" in
	--topologies) topos="$2"; shift 2 ;;
	--ranks) ranks="$2"; shift 2 ;;
	--sizes) sizes="$2"; shift 2 ;;
	--iters) iters="$2"; shift 2 ;;
	--rounds) rounds="$2"; shift 2 ;;
	--iter-bytes) iter_bytes="$2"; shift 2 ;;
	--build) build="$2"; shift 2 ;;
	--out) out="$2"; shift 2 ;;
	--results) results="$2"; shift 2 ;;
	-h|--help) sed -n '2,40p' "$0"; exit 0 ;;
	*) echo "sim.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
	esac
done
case "$build" in /*) ;; *) build="$top/$build" ;; esac
if [ "$(id -u)" != 0 ]; then
	echo "sim.sh: needs root (sparkctl sim makes network namespaces)" >&2
	exit 1
fi
for n in $ranks; do
	if [ "$n" -lt 2 ] || [ "$n" -gt 4 ]; then
		echo "sim.sh: --ranks must be 2..4 (the sims have 4 nodes)" >&2
		exit 2
	fi
done

work=$(mktemp -d /tmp/sc-allreduce-sim.XXXXXX)
prefix="ars$$"
sparkctl="$build/cli/sparkctl"
bench="$build/runtime/spark-bench"
cleanup() {
	"$sparkctl" sim down --name "$prefix" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
res="${results:-$work/results.jsonl}"
[ -n "$results" ] || : > "$res"

# ---- build -----------------------------------------------------------------
if [ ! -x "$bench" ] || [ ! -x "$sparkctl" ]; then
	[ -d "$build" ] || meson setup "$build" "$top" >/dev/null
	ninja -C "$build" runtime/spark-bench cli/sparkctl >/dev/null
fi
mpi_bin="${MPI_BENCH:-}"
if [ -z "$mpi_bin" ] && command -v mpicc >/dev/null &&
   mpicc -O2 -o "$work/mpi_bench" "$here/mpi_bench.c" 2>"$work/mpi.err"; then
	mpi_bin="$work/mpi_bench"
fi
[ -n "$mpi_bin" ] || echo "sim.sh: Open MPI peer not built (install openmpi-bin libopenmpi-dev)" >&2
gloo_bin="${GLOO_BENCH:-}"
if [ -z "$gloo_bin" ] && command -v g++ >/dev/null &&
   g++ -O2 -std=c++17 -o "$work/gloo_bench" "$here/gloo_bench.cc" -lgloo -lpthread 2>"$work/gloo.err"; then
	gloo_bin="$work/gloo_bench"
fi
[ -n "$gloo_bin" ] || echo "sim.sh: Gloo peer not built (install g++ libgloo-dev)" >&2

# plm_rsh_agent: `AGENT HOST orted ARGS...`, HOST = 169.254.100.K (node K).
# The arguments carry literal quotes: run them through a shell. Every node
# shares the host name and /tmp: orteds creating the same session dirs at once
# fail now and then ("mkdir ... File exists"), so each node gets its own.
cat > "$work/rsh-agent" <<EOF
#!/bin/sh
host=\$1
shift
d="$work/ompi/n\${host##*.}"
mkdir -p "\$d"
OMPI_MCA_orte_tmpdir_base=\$d exec "$sparkctl" sim exec "$prefix-\${host##*.}" -- /bin/sh -c "\$*"
EOF
chmod +x "$work/rsh-agent"

export SPARK_COLL_LOG=0
ncpu=$(nproc)
N=4 # nodes per sim
PORT=7411

sx() { # node cmd...: run in node K of the sim
	k=$1
	shift
	"$sparkctl" sim exec "$prefix-$k" -- "$@"
}
sub() { echo $((10 + 2 * ($1 - 1) + $2)); } # cable twin -> third octet
ifname() { # port twin
	case "$1$2" in
	00) echo enp1s0f0np0 ;; 01) echo enP2p1s0f0np0 ;;
	10) echo enp1s0f1np1 ;; 11) echo enP2p1s0f1np1 ;;
	esac
}

ring_addresses() {
	k=1
	while [ "$k" -le "$N" ]; do
		cmd="set -e"
		c=1
		while [ "$c" -le "$N" ]; do
			far=$((c % N + 1))
			for t in 0 1; do
				if [ "$c" = "$k" ]; then
					cmd="$cmd; ip addr add 169.254.$(sub "$c" "$t").$k/24 dev $(ifname 0 "$t")"
				elif [ "$far" = "$k" ]; then
					cmd="$cmd; ip addr add 169.254.$(sub "$c" "$t").$k/24 dev $(ifname 1 "$t")"
				else
					cmd="$cmd; ip route add unreachable 169.254.$(sub "$c" "$t").0/24"
				fi
			done
			c=$((c + 1))
		done
		sx "$k" /bin/sh -c "$cmd"
		k=$((k + 1))
	done
}

ring_routing() { # on|off: far cables via the neighbour on them, or unreachable
	k=1
	while [ "$k" -le "$N" ]; do
		right=$((k % N + 1))
		left=$(((k + N - 2) % N + 1))
		if [ "$1" = on ]; then cmd="set -e; sysctl -qw net.ipv4.ip_forward=1"; else cmd="set -e; sysctl -qw net.ipv4.ip_forward=0"; fi
		c=1
		while [ "$c" -le "$N" ]; do
			far=$((c % N + 1))
			if [ "$c" != "$k" ] && [ "$far" != "$k" ]; then
				for t in 0 1; do
					if [ "$1" = off ]; then
						cmd="$cmd; ip route replace unreachable 169.254.$(sub "$c" "$t").0/24"
					elif [ "$c" = "$right" ] || [ "$far" = "$right" ]; then
						cmd="$cmd; ip route replace 169.254.$(sub "$c" "$t").0/24 via 169.254.$(sub "$k" "$t").$right"
					else
						cmd="$cmd; ip route replace 169.254.$(sub "$c" "$t").0/24 via 169.254.$(sub "$left" "$t").$left"
					fi
				done
			fi
			c=$((c + 1))
		done
		sx "$k" /bin/sh -c "$cmd"
		k=$((k + 1))
	done
}

switch_addresses() {
	k=1
	while [ "$k" -le "$N" ]; do
		sx "$k" /bin/sh -c "set -e; ip addr add 169.254.20.$k/24 dev $(ifname 1 0); ip addr add 169.254.21.$k/24 dev $(ifname 1 1)"
		k=$((k + 1))
	done
}

# Address of node J as node K dials it (spark-bench peers; Gloo, MPI pick their own).
addr_of() { # topo K J
	if [ "$1" = switch ]; then
		echo "169.254.20.$3"
	elif [ "$3" = "$2" ] || [ "$3" = $(($2 % N + 1)) ]; then
		echo "169.254.$(sub "$2" 0).$3" # self, or the right neighbour: cable K
	elif [ "$2" = $(($3 % N + 1)) ]; then
		echo "169.254.$(sub "$3" 1).$3" # the left neighbour: cable J, twin 1
	else
		echo "169.254.$(sub "$3" 0).$3" # not a neighbour: a cable K does not have
	fi
}

# Gloo: one address per rank that every rank dials.
gloo_addr() { # topo K
	if [ "$1" = switch ]; then echo "169.254.20.$2"; else echo "169.254.$(sub "$2" 0).$2"; fi
}

spin_env() { # n: what spark-bench picks by itself on loopback with n ranks here
	if [ "$1" -gt "$ncpu" ]; then
		echo "SPARK_COLL_SPIN_US=0 SPARK_COLL_SPIN_YIELD=1"
	fi
}

run_sc() { # topo n
	topo=$1
	n=$2
	pids=""
	r=0
	while [ "$r" -lt "$n" ]; do
		k=$((r + 1))
		peers=""
		j=0
		while [ "$j" -lt "$n" ]; do
			peers="$peers${peers:+,}$j=$(addr_of "$topo" "$k" $((j + 1))):$PORT"
			j=$((j + 1))
		done
		# a non-neighbour on a ring fails at once (unreachable): 1 s grace is plenty
		# shellcheck disable=SC2046 # spin_env gives NAME=VALUE words
		env $(spin_env "$n") SPARK_COLL_PAIR_TIMEOUT_MS=1000 SPARK_COLL_CONNECT_TIMEOUT_MS=20000 \
			SPARK_COLL_TIMEOUT_MS=60000 timeout 900 \
			"$sparkctl" sim exec "$prefix-$k" -- "$bench" allreduce --rank "$r" --peers "$peers" \
			--algo all --sizes "$sizes" --iters "$iters" --warmup 5 --iter-bytes "$iter_bytes" \
			-o json > "$work/sc.$r.json" 2>"$work/sc.$r.err" &
		pids="$pids $!"
		r=$((r + 1))
	done
	for p in $pids; do wait "$p" || echo "sim.sh: spark-bench $topo n=$n: a rank failed: $(tail -c 300 "$work/sc.0.err")" >&2; done
	python3 - "$work/sc.0.json" "$n" "sim-$topo" >> "$res" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
for r in d["results"]:
    if r["requested"] == "oneshot" and r["algo"] != "oneshot":
        continue  # one-shot is off here (self-test): no one-shot column
    print(json.dumps({"impl": "sc_" + r["requested"], "n": int(sys.argv[2]), "bytes": r["bytes"],
                      "time_us": r["time_us"], "wrong": r["wrong"], "algo": r["algo"],
                      "oneshot_max": d["oneshot_max"], "small_algo": d.get("small_algo", "oneshot"), "decision": d["decision"],
                      "where": sys.argv[3]}))
PY
}

run_mpi() { # topo n
	[ -n "$mpi_bin" ] || return 0
	hosts=""
	k=1
	while [ "$k" -le "$2" ]; do
		hosts="$hosts${hosts:+,}169.254.100.$k:1"
		k=$((k + 1))
	done
	yield=0
	[ "$2" -le "$ncpu" ] || yield=1
	for try in 1 2; do
		: > "$work/mpi.out"
		timeout 900 "$sparkctl" sim exec "$prefix-1" -- mpirun --allow-run-as-root --oversubscribe \
			-np "$2" --host "$hosts" --bind-to none \
			--mca plm_rsh_agent "$work/rsh-agent" --mca rtc_hwloc_vmhole none \
			--mca oob_tcp_if_include 169.254.100.0/24 \
			--mca btl tcp,self --mca btl_tcp_if_exclude lo,enP7s7,enP2p1s0f0np0,enP2p1s0f1np1 \
			--mca mpi_yield_when_idle "$yield" \
			"$mpi_bin" "$sizes" "$iters" 5 "$iter_bytes" >"$work/mpi.out" 2>"$work/mpi.run.err" &&
			[ -s "$work/mpi.out" ] && break
		echo "sim.sh: mpirun $1 n=$2 (try $try) failed or gave no result: $(tail -c 300 "$work/mpi.run.err")" >&2
	done
	grep '^{' "$work/mpi.out" | sed "s/}\$/,\"where\":\"sim-$1\"}/" >> "$res" || true
}

run_gloo() { # topo n algo
	[ -n "$gloo_bin" ] || return 0
	st="$work/store.$1.$2.$3"
	rm -rf "$st"
	mkdir -p "$st"
	pids=""
	r=0
	while [ "$r" -lt "$2" ]; do
		k=$((r + 1))
		GLOO_BENCH_ADDR=$(gloo_addr "$1" "$k") timeout 900 "$sparkctl" sim exec "$prefix-$k" -- \
			"$gloo_bin" "$r" "$2" "$st" "$3" "$sizes" "$iters" 5 "$iter_bytes" \
			> "$work/gloo.$r.out" 2>"$work/gloo.$r.err" &
		pids="$pids $!"
		r=$((r + 1))
	done
	for p in $pids; do wait "$p" || echo "sim.sh: gloo $3 $1 n=$2: a rank failed: $(tail -c 300 "$work/gloo.0.err")" >&2; done
	grep '^{' "$work/gloo.0.out" | sed "s/}\$/,\"where\":\"sim-$1\"}/" >> "$res" || true
}

for topo in $topos; do
	echo "sim.sh: sim up --nodes $N --topology $topo" >&2
	"$sparkctl" sim up --nodes "$N" --topology "$topo" --name "$prefix" --no-agents >/dev/null
	if [ "$topo" = ring ]; then ring_addresses; else switch_addresses; fi
	sleep 1 # carrier on every veth
	round=1
	while [ "$round" -le "$rounds" ]; do
		for n in $ranks; do
			echo "sim.sh: $topo, round $round/$rounds, $n ranks" >&2
			run_sc "$topo" "$n"
			[ "$topo" != ring ] || ring_routing on
			run_mpi "$topo" "$n"
			run_gloo "$topo" "$n" ring
			run_gloo "$topo" "$n" hd
			[ "$topo" != ring ] || ring_routing off
		done
		round=$((round + 1))
	done
	"$sparkctl" sim down --name "$prefix" >/dev/null
done

[ -z "$out" ] || cp "$res" "$out"
if [ -z "$results" ]; then
	echo "# all-reduce across simulated 4-node clusters (veth, one namespace per node), $ncpu cores, $(uname -m), $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "# spark-bench auto/oneshot/relay/doubling/ring vs Open MPI $(mpirun --version 2>/dev/null | head -1 | sed 's/.*) //') (btl tcp) and Gloo (tcp)"
	python3 "$here/table.py" "$res"
fi
