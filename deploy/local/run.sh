#!/usr/bin/env bash
# The main job of embedps on one machine.
#
# Today embedps is its storage engine and its parameter-server shards; the
# training workers arrive later (then this script trains a model end to
# end). What it does now:
#   1. builds everything;
#   2. runs the engine benchmark on a table that fits a small machine;
#   3. starts a 2-shard cluster of real ps_server processes on 127.0.0.1,
#      drives it with ps_bench (Pull/Push through the client library, next
#      to raw gRPC), shows a few of its Prometheus metrics, and stops it.
#
#   deploy/local/run.sh [--rows=N]    (engine rows; default 2,000,000)
#
# Leaves no process behind.
set -euo pipefail
cd "$(dirname "$0")/../.."

rows=2000000
for arg in "$@"; do
  case "$arg" in
    --rows=*) rows="${arg#--rows=}" ;;
    *) echo "usage: $0 [--rows=N]" >&2; exit 2 ;;
  esac
done

deploy/setup.sh
tools/cuda_status.sh
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  bazel shutdown >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== building"
bazel build --color=no --curses=no //embedding:table_benchmark //server:ps_server \
  //tools:ps_bench //tools:raw_grpc_server 2>&1 | tail -n 1

echo
echo "== 1. the embedding engine: $rows rows of dim 64 with Adagrad, 100k-key batches"
bazel-bin/embedding/table_benchmark --rows="$rows" --batches=10 --rounds=3 | tee "$work/engine.txt"

echo
echo "== 2. a 2-shard cluster on 127.0.0.1"
for shard in 0 1; do
  bazel-bin/server/ps_server --host=127.0.0.1 --port=0 --metrics_port=0 \
    --port_file="$work/port$shard" --shard_index=$shard --num_shards=2 \
    --log_level=warn >/dev/null &
  pids+=($!)
done
for shard in 0 1; do
  for _ in $(seq 100); do [ -s "$work/port$shard" ] && break; sleep 0.1; done
  echo "   shard $shard: gRPC port $(sed -n 1p "$work/port$shard"), metrics port $(sed -n 2p "$work/port$shard")"
done

echo
echo "== 3. ps_bench against that cluster (dim 64, uniform keys, float32)"
servers="127.0.0.1:$(sed -n 1p "$work/port0"),127.0.0.1:$(sed -n 1p "$work/port1")"
bazel-bin/tools/ps_bench --servers="$servers" --dims=64 --batch_sizes=100000 --inflight=1 \
  --distributions=uniform --wires=float32 --keys=500000 --seconds=1 | tee "$work/ps.txt"

echo
echo "== 4. the cluster above, seen through its metrics (shard 0)"
mport=$(sed -n 2p "$work/port0")
/usr/bin/python3 - "$mport" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
wanted = ("embedps_shard_info", 'embedps_rpc_calls_total{method="Pull"}',
          'embedps_rpc_calls_total{method="Push"}', "embedps_table_rows",
          "embedps_keys_pulled_total", "embedps_keys_pushed_total")
print("\n".join("   " + l for l in text.splitlines() if l.startswith(wanted)))
PY

echo
echo "== summary"
awk '
  /^(zipf|uniform)/ {
    printf "  engine %-11s %d thread%s: Pull %s M rows/s (%s a bare hash-map gather), Push with Adagrad %s M rows/s (%s)\n",
           $1, $2, ($2 == 1 ? " " : "s"), $5, $9, $7, $10
  }
  /^  table/ { sub(/^  table /, ""); print "  engine memory per row beyond vector and optimizer state: " $0 }
' "$work/engine.txt"
awk '/^(pull|push) / { printf "  cluster %s: %s M keys/s through the client (%sx raw gRPC at the same shape)\n", $1, $8, substr($13, 1, length($13) - 1) }' "$work/ps.txt"
echo "All figures and how to read them: docs/benchmarks.md. Running a cluster by hand: docs/operations.md"
