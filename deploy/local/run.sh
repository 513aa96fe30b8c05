#!/usr/bin/env bash
# The main job of embedps on one machine: trains a DLRM end to end on a
# real local cluster.
#
#   1. builds ps_server, ps_worker and datagen;
#   2. generates a Criteo-format data set from a planted model (datagen),
#      whose Bayes-optimal test AUC is known;
#   3. starts the parameter-server shards (ps_server) and the workers
#      (ps_worker) on 127.0.0.1, workers meeting through
#      shard 0's Coordination service and allreducing their dense
#      gradients with Gloo (CPU) or NCCL (--device=cuda);
#   4. trains to the end of the data, checkpointing tables and dense model
#      every checkpoint_every_steps and at the end (OUT/checkpoints),
#      evaluates on the test split, plots loss and AUC, stops everything.
#
#   deploy/local/run.sh [--train_rows=N] [--test_rows=N] [--servers=N]
#       [--workers=N] [--mode=sync|async|ssp:N] [--device=cpu|cuda]
#       [--batch_size=N] [--epochs=N] [--max_steps=N] [--config=FILE]
#       [--out=DIR] [--restore]
#
# --restore resumes from the latest complete checkpoint in OUT/checkpoints
# (e.g. after a run stopped with --max_steps, or killed), on fresh servers.
#
# Defaults: 1,000,000 training rows, 2 servers, 2 workers, sync, cpu,
# deploy/local/dlrm_small.txtpb, outputs in ./embedps-run. Leaves no
# process behind.
set -euo pipefail
cd "$(dirname "$0")/../.."

train_rows=1000000
test_rows=100000
servers=2
workers=2
mode=sync
device=cpu
batch_size=0
epochs=1
config=deploy/local/dlrm_small.txtpb
out=embedps-run
max_steps=-1
restore=0
for arg in "$@"; do
  case "$arg" in
    --train_rows=*) train_rows="${arg#*=}" ;;
    --test_rows=*) test_rows="${arg#*=}" ;;
    --servers=*) servers="${arg#*=}" ;;
    --workers=*) workers="${arg#*=}" ;;
    --mode=*) mode="${arg#*=}" ;;
    --device=*) device="${arg#*=}" ;;
    --batch_size=*) batch_size="${arg#*=}" ;;
    --epochs=*) epochs="${arg#*=}" ;;
    --config=*) config="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --max_steps=*) max_steps="${arg#*=}" ;;
    --restore) restore=1 ;;
    *) sed -n '/^#   deploy/,/^# process/p' "$0" >&2; exit 2 ;;
  esac
done

deploy/setup.sh
tools/cuda_status.sh
mkdir -p "$out"
out=$(cd "$out" && pwd)
run="$out/run"
rm -rf "$run"
mkdir -p "$run"
checkpoints="$out/checkpoints"
if [ "$restore" = 1 ]; then
  [ -d "$checkpoints" ] || { echo "--restore: no $checkpoints"; exit 2; }
else
  rm -rf "$checkpoints"
fi
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  bazel shutdown >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== building"
bazel build --color=no --curses=no //server:ps_server //worker:ps_worker \
  //tools:datagen 2>&1 | tail -n 1

data="$out/data-$train_rows-$test_rows"
echo
if [ -s "$data/meta.json" ]; then
  echo "== data: reusing $data"
else
  echo "== data: $train_rows training and $test_rows test rows from a planted model"
  bazel-bin/tools/datagen --output_dir="$data" --train_rows="$train_rows" \
    --test_rows="$test_rows"
fi

echo
echo "== cluster: $servers ps_server shards on 127.0.0.1"
for ((s = 0; s < servers; s++)); do
  bazel-bin/server/ps_server --host=127.0.0.1 --port=0 --metrics_port=0 \
    --port_file="$run/port$s" --shard_index=$s --num_shards="$servers" \
    --num_workers="$workers" --data_dir="$run/data$s" --log_level=warn \
    >"$run/server$s.log" 2>&1 &
  pids+=($!)
done
addresses=""
for ((s = 0; s < servers; s++)); do
  for _ in $(seq 100); do [ -s "$run/port$s" ] && break; sleep 0.1; done
  port=$(sed -n 1p "$run/port$s")
  [ -n "$port" ] || { echo "shard $s did not start:"; cat "$run/server$s.log"; exit 1; }
  addresses="$addresses${addresses:+,}127.0.0.1:$port"
  echo "   shard $s: 127.0.0.1:$port (metrics on port $(sed -n 2p "$run/port$s"))"
done

echo
echo "== training: $workers ps_worker processes, mode $mode, device $device"
worker_pids=()
for ((r = 0; r < workers; r++)); do
  args=(--config="$config" --servers="$addresses" --rank=$r
        --world_size="$workers" --mode="$mode" --device="$device"
        --train_data="$data/train.txt" --test_data="$data/test.txt"
        --bayes_metrics="$data/meta.json" --output_dir="$out"
        --job_name="run-$$" --checkpoint_dir="$checkpoints"
        --max_steps="$max_steps")
  [ "$restore" = 1 ] && args+=(--restore="$checkpoints")
  [ "$batch_size" -gt 0 ] && args+=(--batch_size="$batch_size")
  args+=(--epochs="$epochs")
  if [ "$r" -eq 0 ]; then
    # Rank 0's progress goes to the terminal; every log is kept in $run.
    bazel-bin/worker/ps_worker "${args[@]}" >"$run/summary.json" \
      2> >(tee "$run/worker0.log" >&2) &
  else
    bazel-bin/worker/ps_worker "${args[@]}" >/dev/null 2>"$run/worker$r.log" &
  fi
  worker_pids+=($!)
  pids+=($!)
done
failed=0
for ((r = 0; r < workers; r++)); do
  if ! wait "${worker_pids[$r]}"; then
    failed=1
    echo "worker $r failed; its log ($run/worker$r.log) ends:"
    tail -n 5 "$run/worker$r.log"
  fi
done
[ "$failed" -eq 0 ] || exit 1

echo
echo "== the shards after training"
for ((s = 0; s < servers; s++)); do
  mport=$(sed -n 2p "$run/port$s")
  /usr/bin/python3 - "$mport" "$s" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
rows = [l.split()[-1] for l in text.splitlines() if l.startswith("embedps_table_rows")]
pulled = [l.split()[-1] for l in text.splitlines() if l.startswith("embedps_keys_pulled_total")]
print(f"   shard {sys.argv[2]}: {rows[0] if rows else '?'} rows, {pulled[0] if pulled else '?'} keys pulled")
PY
done
for ((s = 0; s < servers; s++)); do kill -TERM "${pids[$s]}"; done
for ((s = 0; s < servers; s++)); do wait "${pids[$s]}" || true; done

bayes=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bayes_test_auc"])' "$data/meta.json")
gnuplot -e "history='$out/history.csv'; output='$out/training.png'; bayes=$bayes" \
  tools/plot_training.gp

echo
echo "== summary"
/usr/bin/python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(f"  {s['workers']} workers x {s['servers']} servers, mode {s['mode']}, device {s['device']}")
print(f"  trained {s['samples']:,} samples in {s['train_seconds']:.1f} s: {s['samples_per_second']:,.0f} samples/s")
print(f"  test AUC {s['test_auc']:.4f}  (Bayes-optimal {s['bayes_test_auc']:.4f}, gap {s['bayes_test_auc'] - s['test_auc']:.4f})")
print(f"  test log loss {s['test_logloss']:.4f}  (Bayes-optimal {s['bayes_test_logloss']:.4f})")
print(f"  data: {s['parse_lines_per_second']:,.0f} lines/s parsed per worker, {s['bad_lines']} malformed lines skipped")
if s['restored_from']:
    print(f"  resumed at step {s['start_step']} from {s['restored_from']}")
print(f"  {s['checkpoints']} checkpoint(s), training paused at most {1000 * s['checkpoint_pause_max_seconds']:.0f} ms for one; latest: {s['last_checkpoint']}")
PY
echo "  outputs: $out/summary.json, $out/history.csv, $out/training.png (loss and AUC),"
echo "           $out/dense.params (dense model); logs in $run"
echo "  resume from the latest checkpoint: deploy/local/run.sh --restore [same flags]"
