#!/bin/sh
# Side-by-side all-reduce benchmark on this machine (loopback TCP): libsparkcoll
# (spark-bench: auto, one-shot, relay, doubling, ring) against Open MPI (MPI_Allreduce, btl tcp)
# and Gloo (ring as torch.distributed uses it, and halving-doubling), same ranks,
# same sizes, one invocation, one table with ratios.
#
#   bench/allreduce/run.sh [--ranks "2 4 8"] [--sizes LIST] [--iters N]
#                          [--rounds R] [--build DIR] [--out FILE]
#                          [--sim [--sim-ranks "2 4"] | --sim-only]
#
# --sim also runs the same programs across the nodes of a simulated 4-node
# ring and 4-node switch (sim.sh, needs root), one more table each;
# --sim-only runs only those.
#
# Needs: a meson build dir with spark-bench (built if missing), mpicc/mpirun
# (openmpi-bin, libopenmpi-dev), g++ and libgloo-dev. A peer that cannot be
# built is reported and left out of the table.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
ranks="2 4 8"
sizes="8,64,512,4K,16K,64K,256K,1M,4M,16M"
iters=200
rounds=2
iter_bytes=$((64 << 20))
build="${SPARK_BUILD_DIR:-$top/build}"
out=""
sim=0
loopback=1
sim_ranks="2 4"
while [ $# -gt 0 ]; do
	case "$1" in
	--ranks) ranks="$2"; shift 2 ;;
	--sizes) sizes="$2"; shift 2 ;;
	--iters) iters="$2"; shift 2 ;;
	--rounds) rounds="$2"; shift 2 ;;
	--iter-bytes) iter_bytes="$2"; shift 2 ;;
	--build) build="$2"; shift 2 ;;
	--out) out="$2"; shift 2 ;;
	--sim) sim=1; shift ;;
	--sim-only) sim=1; loopback=0; shift ;;
	--sim-ranks) sim_ranks="$2"; shift 2 ;;
	-h|--help) sed -n '2,16p' "$0"; exit 0 ;;
	*) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
	esac
done
case "$build" in /*) ;; *) build="$top/$build" ;; esac

work=$(mktemp -d /tmp/sc-allreduce-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
res="$work/results.jsonl"
: > "$res"

# ---- build -----------------------------------------------------------------
bench="$build/runtime/spark-bench"
# always: a stale spark-bench would measure old code without a word
[ -d "$build" ] || meson setup "$build" "$top" >/dev/null
ninja -C "$build" runtime/spark-bench >/dev/null
have_mpi=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null &&
   mpicc -O2 -o "$work/mpi_bench" "$here/mpi_bench.c" 2>"$work/mpi.err"; then
	have_mpi=1
else
	echo "run.sh: Open MPI peer not built (install openmpi-bin libopenmpi-dev): $(head -c 300 "$work/mpi.err" 2>/dev/null)" >&2
fi
have_gloo=0
if command -v g++ >/dev/null &&
   g++ -O2 -std=c++17 -o "$work/gloo_bench" "$here/gloo_bench.cc" -lgloo -lpthread 2>"$work/gloo.err"; then
	have_gloo=1
else
	echo "run.sh: Gloo peer not built (install g++ libgloo-dev): $(head -c 300 "$work/gloo.err")" >&2
fi

# iterations per size: `iters`, fewer for big sizes (about iter_bytes per size)
export SPARK_COLL_LOG=0

run_sc() { # n: auto, one-shot, relay and ring interleaved in one process
	"$bench" allreduce --local "$1" --algo all --sizes "$sizes" --iters "$iters" \
		--warmup 5 --iter-bytes "$iter_bytes" -o json > "$work/sc.json" ||
		echo "run.sh: spark-bench n=$1 failed" >&2
	python3 - "$work/sc.json" "$1" >> "$res" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
for r in d["results"]:
    print(json.dumps({"impl": "sc_" + r["requested"], "n": int(sys.argv[2]), "bytes": r["bytes"],
                      "time_us": r["time_us"], "wrong": r["wrong"], "algo": r["algo"],
                      "oneshot_max": d["oneshot_max"], "small_algo": d.get("small_algo", "oneshot")}))
PY
}

run_mpi() { # n
	[ "$have_mpi" = 1 ] || return 0
	timeout 900 mpirun --allow-run-as-root --oversubscribe -np "$1" --bind-to none \
		--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
		--mca rtc_hwloc_vmhole none \
		"$work/mpi_bench" "$sizes" "$iters" 5 "$iter_bytes" 2>"$work/mpi.run.err" >> "$res" ||
		echo "run.sh: mpirun n=$1 failed: $(tail -c 300 "$work/mpi.run.err")" >&2
}

run_gloo() { # n algo
	[ "$have_gloo" = 1 ] || return 0
	st="$work/store.$1.$2"
	rm -rf "$st"; mkdir -p "$st"
	pids=""
	r=0
	while [ "$r" -lt "$1" ]; do
		if [ "$r" = 0 ]; then
			timeout 900 "$work/gloo_bench" "$r" "$1" "$st" "$2" "$sizes" "$iters" 5 "$iter_bytes" >> "$res" 2>"$work/gloo.run.err" &
		else
			timeout 900 "$work/gloo_bench" "$r" "$1" "$st" "$2" "$sizes" "$iters" 5 "$iter_bytes" >/dev/null 2>&1 &
		fi
		pids="$pids $!"
		r=$((r + 1))
	done
	for p in $pids; do wait "$p" || echo "run.sh: gloo $2 n=$1 rank failed" >&2; done
}

round=1
[ "$loopback" = 1 ] || round=$((rounds + 1))
while [ "$round" -le "$rounds" ]; do
	for n in $ranks; do
		echo "run.sh: round $round/$rounds, $n ranks" >&2
		run_sc "$n"
		run_mpi "$n"
		run_gloo "$n" ring
		run_gloo "$n" hd
	done
	round=$((round + 1))
done

if [ "$sim" = 1 ]; then
	mb=""
	gb=""
	[ "$have_mpi" = 1 ] && mb="$work/mpi_bench"
	[ "$have_gloo" = 1 ] && gb="$work/gloo_bench"
	MPI_BENCH="$mb" GLOO_BENCH="$gb" "$here/sim.sh" --ranks "$sim_ranks" --sizes "$sizes" \
		--iters "$iters" --rounds "$rounds" --iter-bytes "$iter_bytes" --build "$build" \
		--results "$res" || echo "run.sh: sim.sh failed" >&2
fi

if [ "$loopback" = 1 ]; then
	echo "# all-reduce on loopback TCP, $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%dT%H:%MZ)"
fi
if [ "$sim" = 1 ]; then
	echo "# all-reduce across simulated 4-node clusters (sparkctl sim: a namespace per node, veth cables), $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%dT%H:%MZ)"
fi
echo "# spark-bench auto/oneshot/relay/doubling/ring vs Open MPI $(mpirun --version 2>/dev/null | head -1 | sed 's/.*) //') (btl tcp) and Gloo (tcp)"
python3 "$here/table.py" "$res"
[ -z "$out" ] || cp "$res" "$out"
