#!/usr/bin/env bash
# The soak (issue 12, item 5): rounds of the chaos suite's faults — cut, stalled and refused
# connections, a SIGKILL of the API server (in the first round), on etcd a member restarted
# and its leader killed — while 64 writers, three informers, two checked watch streams,
# short-lived watchers and the control plane rolling a Deployment run, for MINUTES (default
# 60). After each round it prints the server's resident memory, open descriptors and live
# tokio tasks (from its /metrics); at the end it checks that they stayed flat after the
# warm-up, and every invariant of the chaos suite (crates/listwatch/tests/chaos.rs).
#
#   scripts/soak.sh [MINUTES] [embedded|etcd]
#
# Optimized build; the etcd variant needs Debian's etcd-server (scripts/test.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
export LISTWATCH_SOAK_MINUTES="${1:-60}"
export LISTWATCH_SOAK_STORE="${2:-embedded}"
exec cargo test --release -p listwatch --test chaos -- --ignored soak --nocapture
