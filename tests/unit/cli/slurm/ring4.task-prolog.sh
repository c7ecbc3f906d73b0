#!/bin/sh
# TaskProlog for Slurm 22.05, written by `sparkctl export slurm` (sparkctl 0.1.0).
# Cluster: lab
# Topology: ring of 4 nodes, validation pass at 2026-12-01T21:03:20Z
# Exported: 2026-12-01T21:20:00Z. Do not edit: export again after a change and diff.
# Slurm runs it before each task, as the job's user; its "export NAME=value"
# lines become the task's environment: the variables `sparkctl run` gives a rank
# on this node (NCCL_*, UCX, GLOO/TP, MASTER_*, SPARK_*), from this node's sparkd.
socket='/run/sparkctl/sparkd.sock'
case $socket in *%n*) socket=$(printf '%s' "$socket" | sed "s/%n/$SLURMD_NODENAME/g");; esac
if out=$('/usr/bin/sparkctl' --socket "$socket" env --slurm 2>&1); then
	printf '%s\n' "$out"
else
	printf 'print sparkctl TaskProlog: %s\n' "$(printf '%s' "$out" | tail -n 1)"
fi
exit 0
