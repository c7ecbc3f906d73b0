#!/usr/bin/env bash
# The daemons under valgrind: a head and two workers go through init, joins,
# status, drain, token revoke, node rm, leave and a clean SIGTERM. Any definite
# leak or memory error makes valgrind exit 99 and this test fail.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
vg_init vg
vg_loopback_agents h w1 w2
TOKEN=$(ctl h init --name vg -o json | jget token)
ctl w1 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 20s
ctl w2 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" --timeout 20s
sleep 2
ctl w1 status >/dev/null
ctl h node drain w2 >/dev/null
ctl h node show w2 >/dev/null
ID=$(ctl h token create -o json | jget id)
ctl h token revoke "$ID" >/dev/null
ctl h token ls >/dev/null
ctl w1 join "127.0.0.1:${PORT[h]}" --token "$TOKEN" 2>/dev/null && exit 1
ctl h node rm w2 >/dev/null
ctl w1 leave >/dev/null
sleep 1
vg_finish "3 daemons"
