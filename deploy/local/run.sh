#!/usr/bin/env bash
# The main job of embedps on one machine.
#
# Today embedps is its storage engine (embedding/): this builds it and runs
# the engine benchmark on a table that fits a small machine, then prints
# what it measured. The cluster run (ps_server + ps_worker processes
# training a model) replaces this as those parts land.
#
#   deploy/local/run.sh [--rows=N] [--dim=D] [--batches=B] [--rounds=R]
#
# Defaults: 2,000,000 rows of dim 64 (about 1.1 GB), 100k-key batches.
# Leaves no process behind.
set -euo pipefail
cd "$(dirname "$0")/../.."

deploy/setup.sh
tools/cuda_status.sh
trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT

echo "== building the embedding engine"
bazel build --color=no --curses=no //embedding:table_benchmark 2>&1 | tail -n 2

echo "== running the engine benchmark"
out=$(mktemp)
bazel-bin/embedding/table_benchmark --rows=2000000 --batches=10 --rounds=3 "$@" | tee "$out"

echo
echo "== summary"
awk '
  /^(zipf|uniform)/ {
    printf "  %-11s %d thread%s: Pull %s M rows/s (%s a bare hash-map gather), Push with Adagrad %s M rows/s (%s)\n",
           $1, $2, ($2 == 1 ? " " : "s"), $5, $9, $7, $10
  }
  /^  table/ { sub(/^  table /, ""); print "  memory per row beyond vector and optimizer state: " $0 }
' "$out"
rm -f "$out"
echo "Figures for a 10M-row table and how to read them: docs/benchmarks.md"
