#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_session (corpus/session/): byte programs for
its frame generator. The order in which fields are read is next_frame() and its
helpers in tests/fuzz/fuzz_session.c; change both together. Run from anywhere:
python3 tests/fuzz/corpus/session.py"""
import os

OPS = dict(heartbeat=0, hello=1, fabric=2, topo_reply=3, topo_ep=4, topo_other=5, job_req=6,
           forward=8, job_started=10, job_exit=11, job_data=12, job_sync=13, exec_data=14,
           exec_exit=15, stream_cancel=16, leave=17, crl=18, join=19, wrong_way=20, unknown=21)
JOBS = ["group_create", "group_ls", "group_show", "group_rm", "job_run", "job_ls", "job_show",
        "job_logs", "job_cancel", "exec", "status", "token_create"]
CLUSTER = ["status", "node_ls", "node_show", "node_drain", "node_undrain", "node_rm",
           "token_create", "token_ls", "token_revoke", "topo_show", "topo_validate",
           "topo_addresses", "init", "join", "leave", "version", "group_create", "job_run",
           "debug_memory", "nosuch"]
CALLER = dict(root=0, alice=1, bob_admin=3)


def text(s):
    return [len(s)] + list(s.encode())


SEEN = [0, 0]       # gint: the latest id the head sent
ABSENT = [8]
ZERO = [3]
FALSE = [1]
TRUE = [0]


def lit(n):
    return [5, n]


HEALTHY = [3, 2, 0, 0]  # gdiscovery: the fixture, unchanged (port 2 does not exist)


def fr(op, *parts):
    b = [OPS[op], 1]  # id 0
    for p in parts:
        b += p
    return b


def req(outer, t, caller, fields):
    types = JOBS if outer == "job_req" else CLUSTER
    b = [OPS[outer], 1, types.index(t), 7, CALLER[caller]]
    if outer == "job_req":
        b += [1, 1]  # uid and user from the caller; origin fz-w1
    return b + fields + [2]  # the request object itself


hello = fr("hello", [1], text("0.1.0"))
hb = fr("heartbeat")
fabric = fr("fabric", HEALTHY)
# group g1 (fz-w1) or g2 (fz-head, fz-w1), native, ["true"], env [], 1 rank per node, no timeout; foreground or detached
run_fg = [0, 0, 1, 0, 0] + lit(1) + ZERO + FALSE + [0, 0]
run_bg = [1, 0, 1, 0, 0] + lit(1) + ZERO + TRUE + [0, 0]
job_key = [0, 1]    # the latest job id, as a string
seeds = {
    "hello_heartbeat_fabric": hello + hb + fabric + hb,
    "forward_status_and_node_ls": hello + req("forward", "status", "alice", [])
    + req("forward", "node_ls", "alice", []) + req("forward", "node_show", "alice", [1]),
    "forward_admin_by_user": hello + req("forward", "node_rm", "alice", [1])
    + req("forward", "token_create", "alice", ZERO + ZERO + text("x"))
    + req("forward", "node_drain", "alice", [1])
    + req("job_req", "group_create", "alice", [0] + FALSE + [1] + lit(1)),
    "forward_admin_by_root": hello
    + req("forward", "token_create", "root", ZERO + lit(2) + text("by root"))
    + req("forward", "node_drain", "bob_admin", [1]) + req("forward", "token_ls", "root", [])
    + req("job_req", "group_create", "root", [0] + FALSE + [1] + lit(1)),
    "job_run_then_member_reports": hello + fabric + req("job_req", "job_run", "alice", run_fg)
    + fr("job_started", SEEN, [1], SEEN, lit(99), ABSENT)
    + fr("job_data", SEEN, SEEN, SEEN, ZERO, text("hello\n"), FALSE, [1])
    + fr("job_exit", SEEN, SEEN, ZERO, ZERO, FALSE, ABSENT)
    + req("job_req", "job_ls", "alice", FALSE + ABSENT),
    "job_run_detached_cancel": hello + req("job_req", "job_run", "alice", run_bg)
    + req("job_req", "job_cancel", "alice", job_key + ABSENT + FALSE)
    + fr("job_sync", [1], SEEN, SEEN, [1], ZERO, FALSE),
    "exec_on_member": hello + req("job_req", "exec", "alice", [0, 1, 0] + FALSE + ABSENT)
    + fr("exec_data", SEEN, [1], text("ok\n")) + fr("exec_exit", SEEN, ZERO, ZERO, [0]),
    "exec_on_head_node": hello + req("job_req", "exec", "alice", [2, 1, 0] + FALSE + ABSENT) + hb,
    "topo_show_with_state": hello + fabric
    + req("forward", "topo_show", "alice", [0] + TRUE + FALSE + [0])
    + fr("topo_reply", [1, 0], [1], [2] + HEALTHY + [1, 1, 1, 1, 0, 10, 100]),
    "logs_and_stream_cancel": hello + req("job_req", "job_run", "alice", run_fg)
    + req("job_req", "job_logs", "alice", job_key + ABSENT + TRUE) + fr("stream_cancel", SEEN) + hb,
    "leave": hello + hb + fr("leave", [0]),
    # --timeout of 2^63-1 s: start + timeout must not overflow
    "job_run_huge_timeout": hello + req("job_req", "job_run", "alice",
                                        [0, 0, 1, 0, 0] + lit(1) + [7, 1] + TRUE + [0, 0]),
    # a job whose node leaves: the head's tick loses the rank and ends the job
    "job_then_leave": hello + req("job_req", "job_run", "alice", run_bg) + fr("leave", [0]),
    "odd_frames": hello + fr("crl", text("-----BEGIN X509 CRL-----"))
    + fr("join", text("s"), text("c")) + fr("wrong_way", [0], SEEN, SEEN)
    + fr("unknown", text("nosuch")) + fr("topo_other", [0]) + hb,
}
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "session")
os.makedirs(out, exist_ok=True)
for name, b in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(bytes(x & 0xff for x in b))
print(f"{len(seeds)} seeds in {out}")
