#!/usr/bin/env bash
# The multi-host benchmark: the DLRM job across hosts (network namespaces
# on this machine, TLS and tokens on) at 10 and 1 Gbit/s links, next to the
# same job on loopback in the same run. Root. Prints one table.
#
#   bench/multihost/run.sh [--train_rows=400000] [--repeats=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build //server:ps_server //worker:ps_worker //tools:datagen >/dev/null 2>&1
exec /usr/bin/python3 bench/multihost/bench.py "$@"
