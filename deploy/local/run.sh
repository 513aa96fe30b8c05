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
#   4. starts serving replicas (ps_server --role=serving) that follow the
#      job: they load its checkpoints and apply the rows it publishes
#      every publish_every_seconds;
#   5. trains to the end of the data, checkpointing tables and dense model
#      every checkpoint_every_steps and at the end (OUT/checkpoints),
#      evaluates on the test split, plots loss and AUC;
#   6. evaluates the test split again through the serving path
#      (ps_predictor over the replicas: Predict with the embeddings and
#      dense model of the final step), measures Lookup and Predict
#      latency, and stops everything.
#
#   deploy/local/run.sh [--train_rows=N] [--test_rows=N] [--vocab=A,B,...]
#       [--servers=N]
#       [--workers=N] [--replicas=N] [--mode=sync|async|ssp:N]
#       [--device=cpu|cuda] [--batch_size=N] [--epochs=N] [--max_steps=N]
#       [--hot_rows=N] [--config=FILE] [--out=DIR] [--restore]
#
# --hot_rows=N: every worker holds and trains the N most pulled rows of
# each table itself (the hot-row tier, docs/architecture.md "Hot rows";
# with --device=cuda one worker only).
# --restore resumes from the latest complete checkpoint in OUT/checkpoints
# (e.g. after a run stopped with --max_steps, or killed), on fresh servers.
#
# Defaults: 1,000,000 training rows over vocabularies like Criteo's (the
# 26 slots cycle through 100, 10k, 300k and 3M values, Zipf 1.05: a few
# slots with millions of values, ~1.9M distinct keys in the tables), 2
# servers, 2 workers, 2 serving
# replicas (0: no serving), sync, cpu,
# deploy/local/dlrm_small.txtpb, outputs in ./embedps-run. Leaves no
# process behind.
set -euo pipefail
cd "$(dirname "$0")/../.."

train_rows=1000000
test_rows=100000
vocab=100,10000,300000,3000000
servers=2
workers=2
replicas=2
mode=sync
device=cpu
batch_size=0
epochs=1
config=deploy/local/dlrm_small.txtpb
out=embedps-run
max_steps=-1
hot_rows=0
restore=0
for arg in "$@"; do
  case "$arg" in
    --train_rows=*) train_rows="${arg#*=}" ;;
    --test_rows=*) test_rows="${arg#*=}" ;;
    --vocab=*) vocab="${arg#*=}" ;;
    --servers=*) servers="${arg#*=}" ;;
    --workers=*) workers="${arg#*=}" ;;
    --replicas=*) replicas="${arg#*=}" ;;
    --mode=*) mode="${arg#*=}" ;;
    --device=*) device="${arg#*=}" ;;
    --batch_size=*) batch_size="${arg#*=}" ;;
    --epochs=*) epochs="${arg#*=}" ;;
    --config=*) config="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --max_steps=*) max_steps="${arg#*=}" ;;
    --hot_rows=*) hot_rows="${arg#*=}" ;;
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
# The servers write and read checkpoints only inside it (--checkpoint_root).
mkdir -p "$checkpoints"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  bazel shutdown >/dev/null 2>&1 || true
}
trap cleanup EXIT

echo "== building"
bazel build --color=no --curses=no //server:ps_server //worker:ps_worker \
  //worker:ps_predictor //tools:datagen //tools:serve_bench 2>&1 | tail -n 1

data="$out/data-$train_rows-$test_rows-${vocab//,/-}"
echo
if [ -s "$data/meta.json" ]; then
  echo "== data: reusing $data"
else
  echo "== data: $train_rows training and $test_rows test rows from a planted model (vocabularies $vocab)"
  bazel-bin/tools/datagen --output_dir="$data" --train_rows="$train_rows" \
    --test_rows="$test_rows" --vocab="$vocab"
fi

echo
echo "== cluster: $servers ps_server shards on 127.0.0.1"
for ((s = 0; s < servers; s++)); do
  bazel-bin/server/ps_server --host=127.0.0.1 --port=0 --metrics_port=0 \
    --port_file="$run/port$s" --shard_index=$s --num_shards="$servers" \
    --num_workers="$workers" --data_dir="$run/data$s" \
    --checkpoint_root="$checkpoints" --log_level=warn \
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

# port_or_die FILE WHAT LOG: the first line of a port file once written.
port_or_die() {
  for _ in $(seq 600); do [ -s "$1" ] && break; sleep 0.1; done
  local port
  port=$(sed -n 1p "$1" 2>/dev/null || true)
  [ -n "$port" ] || { echo "$2 did not start:"; tail -n 20 "$3"; exit 1; }
  echo "$port"
}

serving=""
if [ "$replicas" -gt 0 ]; then
  echo
  echo "== serving: $replicas replicas of one serving shard, following the job"
  echo "   (they start from its first checkpoint, then apply its publications)"
  for ((r = 0; r < replicas; r++)); do
    rm -f "$run/serving_port$r"
    bazel-bin/server/ps_server --role=serving --host=127.0.0.1 --port=0 \
      --metrics_port=0 --port_file="$run/serving_port$r" \
      --follow_checkpoints="$checkpoints" --checkpoint_root="$checkpoints" \
      --training_servers="$addresses" \
      --checkpoint_poll=1s --log_level=warn >"$run/serving$r.log" 2>&1 &
    pids+=($!)
  done
  # How far the replicas trail training: their version's age, sampled.
  /usr/bin/python3 - "$run" "$replicas" >"$run/serving_lag.tsv" <<'PY' &
import os, sys, time, urllib.request
run, n = sys.argv[1], int(sys.argv[2])
print("seconds\treplica\tstep\tage_seconds", flush=True)
start = time.time()
while True:
    for r in range(n):
        try:
            port = open(f"{run}/serving_port{r}").read().split()[1]
            text = urllib.request.urlopen(
                f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
        except Exception:
            continue
        m = {l.split()[0]: float(l.split()[1]) for l in text.splitlines()
             if l.startswith("embedps_serving_version_")}
        if "embedps_serving_version_step" in m:
            print(f"{time.time() - start:.2f}\t{r}\t"
                  f"{m['embedps_serving_version_step']:.0f}\t"
                  f"{m.get('embedps_serving_version_age_seconds', -1):.3f}",
                  flush=True)
    time.sleep(0.25)
PY
  sampler=$!
  pids+=($sampler)
fi

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
  [ "$hot_rows" -gt 0 ] && args+=(--hot_rows="$hot_rows")
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

if [ "$replicas" -gt 0 ]; then
  kill "$sampler" 2>/dev/null || true
  final=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["last_published_step"])' "$run/summary.json")
  echo
  echo "== serving: the replicas catch up to step $final, then the test split through Predict"
  for ((r = 0; r < replicas; r++)); do
    port=$(port_or_die "$run/serving_port$r" "serving replica $r" "$run/serving$r.log")
    serving="$serving${serving:+,}127.0.0.1:$port"
    mport=$(sed -n 2p "$run/serving_port$r")
    /usr/bin/python3 - "$mport" "$final" "$r" <<'PY' || exit 1
import sys, time, urllib.request
port, final, r = sys.argv[1], int(sys.argv[2]), sys.argv[3]
deadline = time.time() + 120
while time.time() < deadline:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    step = [float(l.split()[1]) for l in text.splitlines() if l.startswith("embedps_serving_version_step")]
    if step and step[0] >= final:
        print(f"   replica {r}: serving step {step[0]:.0f}")
        sys.exit(0)
    time.sleep(0.2)
print(f"replica {r} did not reach step {final} within 120 s")
sys.exit(1)
PY
  done
  rm -f "$run/predictor_port"
  bazel-bin/worker/ps_predictor --config="$config" --serving="$serving" \
    --port=0 --port_file="$run/predictor_port" --log_level=warn \
    >"$run/predictor.log" 2>&1 &
  predictor=$!
  pids+=($predictor)
  pport=$(port_or_die "$run/predictor_port" ps_predictor "$run/predictor.log")
  bazel-bin/tools/serve_bench --evaluate="$data/test.txt" \
    --predictor="127.0.0.1:$pport" --serving="$serving" --config="$config" \
    --latency_rate=1000 --latency_seconds=3 >"$run/serving.json"
  kill -TERM "$predictor"
  wait "$predictor" || true
fi

echo
echo "== the shards after training"
for ((s = 0; s < servers; s++)); do
  mport=$(sed -n 2p "$run/port$s")
  /usr/bin/python3 - "$mport" "$s" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
def first(name):
    values = [l.split()[-1] for l in text.splitlines() if l.startswith(name)]
    return float(values[0]) if values else float("nan")
print(f"   shard {sys.argv[2]}: {first('embedps_table_rows'):,.0f} rows, "
      f"table {first('embedps_table_resident_bytes') / 2**20:,.0f} MiB in memory, "
      f"process {first('embedps_resident_bytes ') / 2**20:,.0f} MiB resident, "
      f"{first('embedps_keys_pulled_total'):,.0f} keys pulled")
PY
done
for ((s = 0; s < servers; s++)); do kill -TERM "${pids[$s]}"; done
for ((s = 0; s < servers; s++)); do wait "${pids[$s]}" || true; done

bayes=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bayes_test_auc"])' "$data/meta.json")
# A job resumed at its last step trains nothing: no curve to draw.
if [ "$(grep -c '^[0-9]*,[0-9]' "$out/history.csv")" -gt 0 ]; then
  gnuplot -e "history='$out/history.csv'; output='$out/training.png'; bayes=$bayes" \
    tools/plot_training.gp
else
  echo "(no training steps ran: no plot)"
fi

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
print(f"  tables hold {s['table_rows']:,} rows; {s['rows_evicted']:,} rows evicted (TTL and max_rows)")
print(f"  {s['checkpoints']} checkpoint(s), training paused at most {1000 * s['checkpoint_pause_max_seconds']:.0f} ms for one; latest: {s['last_checkpoint']}")
PY
if [ "$replicas" -gt 0 ]; then
  /usr/bin/python3 - "$out/summary.json" "$run/serving.json" "$run/serving_lag.tsv" "$replicas" <<'PY' || exit 1
import json, statistics, sys
s = json.load(open(sys.argv[1]))
v = json.load(open(sys.argv[2]))
lag = [l.split("\t") for l in open(sys.argv[3]).read().splitlines()[1:]]
ages = [float(a) for _, _, _, a in lag if float(a) >= 0]
steps = sorted({int(st) for _, _, st, _ in lag})
print(f"  serving: {sys.argv[4]} replicas followed the job through {s['publications']} publications;")
if ages:
    print(f"    while it trained they served {len(steps)} distinct steps, the version "
          f"{statistics.median(ages):.1f} s old at the median, {max(ages):.1f} s at most")
diff = abs(v['auc'] - s['test_auc'])
print(f"    test AUC through Predict {v['auc']:.4f} at step {v['version']} "
      f"(the worker's {s['test_auc']:.4f} at step {s['steps']}: |diff| {diff:.1e})")
print(f"    at {v['latency_rate']:.0f} requests/s: Predict of one line p50 {v['predict_p50_ms']:.2f} ms, "
      f"p99 {v['predict_p99_ms']:.2f} ms; Lookup of {v['lookup_keys']} keys in "
      f"one bag a slot p50 {v['lookup_p50_ms']:.2f} ms, p99 {v['lookup_p99_ms']:.2f} ms")
if diff > 1e-4 or v['version'] != s['steps']:
    print("  serving does not match training: see", sys.argv[2])
    sys.exit(1)
PY
fi
echo "  outputs: $out/summary.json, $out/history.csv, $out/training.png (loss and AUC),"
echo "           $out/dense.params (dense model); logs in $run"
echo "  resume from the latest checkpoint: deploy/local/run.sh --restore [same flags]"
