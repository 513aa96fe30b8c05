#!/usr/bin/env bash
# embedps against the PyTorch reference DLRM on the same data, same model,
# same initialization scheme and optimizer settings, in the same run:
# samples/s and test AUC side by side.
#
#   tools/reference/compare.sh [--train_rows=N] [--test_rows=N] [--out=DIR]
#       [--model=small|large] [--vocab=A,B,...] [--torch=pypi|debian|both]
#       [--workers=N] [--rounds=N] [--worker_flags="--hot_rows=N ..."]
#       [--cross_layers=N] [--schema]
#
# embedps: 1 ps_server + 1 ps_worker (sync, batch 512,
# deploy/local/dlrm_small.txtpb, or dlrm_large.txtpb: dim 64, bottom
# 512-256-64, top 512-256, ~3 MFLOP a sample; the dense step on every
# core: blas_threads set to nproc).
# PyTorch, one process, 1 and 2 threads: the current PyTorch from PyPI
# (torch 2.15: MKL and oneDNN inside the wheel) in a venv made under OUT on
# the first run (several GB: the wheel pulls CUDA libraries; never part of
# tests/run.sh), and Debian's python3-torch (1.13) with the pthread and the
# OpenMP builds of OpenBLAS. Each run reports the BLAS it used; the fastest
# candidate is the one compared against. --vocab: datagen's values per slot
# (default: like Criteo's, 100, 10k, 300k and 3M cycled over the 26 slots;
# 10,30,100,1000 is datagen's small default). --workers=N (default 1):
# embedps runs N ps_server + N ps_worker (sync, each worker nproc/N dense
# threads) and PyTorch N processes under DistributedDataParallel (Gloo),
# each worker or rank taking its own batch of every step. --rounds=N
# (default 1): everything N times in turn (embedps, then each PyTorch
# candidate); each round's ratio is to that round's fastest candidate, and
# the median of the rounds' ratios is the figure (this machine's speed
# drifts by tens of percent within minutes: rounds taken in turn see the
# same drift). --worker_flags: more ps_worker flags (e.g. the hot-row
# tier); embedps' line then names them and its keys pulled per sample.
# --cross_layers=N (N > 0): DCN-v2 in both (the features through N cross
# layers before the top MLP) instead of DLRM's dot products.
# --schema: the schema job instead of Criteo's layout: tools/schema_datagen's
# planted multi-hot set (counts, a real, ids, lists, a weighted list; its
# defaults but --train_rows/--test_rows) through
# deploy/local/schema_small.txtpb (one table of dim 8, bottom 32-8, top
# 32-16, batch 256); PyTorch reads the same files with dlrm_torch.py
# --schema (mean-pooled and weighted EmbeddingBags). --model and --vocab do
# not apply.
# Installs python3-torch and libopenblas0-openmp if missing
# (benchmark-only dependencies).
set -euo pipefail
cd "$(dirname "$0")/../.."

train_rows=500000
test_rows=50000
out=/tmp/embedps-compare
model=small
vocab=100,10000,300000,3000000
which_torch=both
workers=1
rounds=1
worker_flags=""
cross_layers=0
schema=0
for arg in "$@"; do
  case "$arg" in
    --train_rows=*) train_rows="${arg#*=}" ;;
    --test_rows=*) test_rows="${arg#*=}" ;;
    --out=*) out="${arg#*=}" ;;
    --model=*) model="${arg#*=}" ;;
    --vocab=*) vocab="${arg#*=}" ;;
    --torch=*) which_torch="${arg#*=}" ;;
    --workers=*) workers="${arg#*=}" ;;
    --rounds=*) rounds="${arg#*=}" ;;
    --worker_flags=*) worker_flags="${arg#*=}" ;;
    --cross_layers=*) cross_layers="${arg#*=}" ;;
    --schema) schema=1 ;;
    *) sed -n '/^#   tools/,/^#$/p' "$0" >&2; exit 2 ;;
  esac
done

deploy/setup.sh
missing=()
for pkg in python3-torch libopenblas0-openmp; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "installed" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "compare: installing ${missing[*]}"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

bazel build --color=no --curses=no //server:ps_server //worker:ps_worker \
  //tools:datagen //tools:schema_datagen 2>&1 | tail -n 1
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ "$schema" -eq 1 ]; then
  data="$out/schema-$train_rows-$test_rows"
  [ -s "$data/meta.json" ] || bazel-bin/tools/schema_datagen --output_dir="$data" \
    --train_rows="$train_rows" --test_rows="$test_rows" >/dev/null
  train_file="$data/train.tsv" test_file="$data/test.tsv"
else
  data="$out/data-$train_rows-$test_rows-${vocab//,/-}"
  [ -s "$data/meta.json" ] || bazel-bin/tools/datagen --output_dir="$data" \
    --train_rows="$train_rows" --test_rows="$test_rows" --vocab="$vocab" >/dev/null
  train_file="$data/train.txt" test_file="$data/test.txt"
fi
if [ "$which_torch" != debian ] && [ ! -x "$out/venv-torch/bin/python" ]; then
  echo "== a venv with PyPI's current torch: $out/venv-torch"
  rm -rf "$out/venv-torch"
  python3 -m venv "$out/venv-torch"
  "$out/venv-torch/bin/pip" install -q --disable-pip-version-check "torch==2.15.*" numpy
fi

pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done; }
trap cleanup EXIT
case "$model" in
  small) torch_model=() ;;
  large) torch_model=(--dim=64 --bottom=512,256,64 --top=512,256) ;;
  *) echo "--model must be small or large" >&2; exit 2 ;;
esac
model_config="deploy/local/dlrm_$model.txtpb"
if [ "$schema" -eq 1 ]; then
  model_config=deploy/local/schema_small.txtpb
  torch_model=(--schema="$data/meta.json" --dim=8 --bottom=32,8 --top=32,16 --batch_size=256)
fi
# The model's config with the cores shared out among the workers, and
# without publications (there is no serving replica here to follow them:
# the training is what is compared).
threads=$(( $(nproc) / workers )); [ "$threads" -ge 1 ] || threads=1
grep -v -e "^blas_threads:" -e "^publish_every_seconds:" \
  "$model_config" >"$out/config.txtpb"
echo "blas_threads: $threads" >>"$out/config.txtpb"
if [ "$cross_layers" -gt 0 ]; then  # DCN-v2 in both
  printf 'interaction: CROSS\ncross_layers: %d\n' "$cross_layers" >>"$out/config.txtpb"
  torch_model+=(--cross_layers="$cross_layers")
fi
config="$out/config.txtpb"

# One embedps run: fresh servers, the workers, worker 0's summary in $1.
run_embedps() {
  local addresses=() worker_pids=() i r servers
  for ((i = 0; i < workers; i++)); do
    rm -f "$out/port$i"
    bazel-bin/server/ps_server --host=127.0.0.1 --port=0 --port_file="$out/port$i" \
      --num_workers="$workers" --shard_index="$i" --num_shards="$workers" \
      --log_level=warn >/dev/null 2>&1 &
    pids+=($!)
    for _ in $(seq 100); do [ -s "$out/port$i" ] && break; sleep 0.1; done
    addresses+=("127.0.0.1:$(sed -n 1p "$out/port$i")")
  done
  servers=$(IFS=,; echo "${addresses[*]}")
  echo "== embedps: $workers ps_server + $workers ps_worker"
  for ((r = 0; r < workers; r++)); do
    bazel-bin/worker/ps_worker --config="$config" --servers="$servers" \
      --rank=$r --world_size="$workers" --job_name="compare-$$" --mode=sync \
      --train_data="$train_file" --test_data="$test_file" \
      --bayes_metrics="$data/meta.json" --log_level=warn $worker_flags \
      >"$out/embedps$r.json" &
    worker_pids+=($!)
    pids+=($!)
  done
  for pid in "${worker_pids[@]}"; do wait "$pid"; done
  cp "$out/embedps0.json" "$1"
  cleanup
  pids=()
}

# Each round's results, one list per round separated by "--".
results=()
for ((round = 1; round <= rounds; round++)); do
  [ "$rounds" -eq 1 ] || echo "== round $round of $rounds"
  suffix=""; [ "$rounds" -eq 1 ] || suffix="-r$round"
  run_embedps "$out/embedps$suffix.json"
  results+=("$out/embedps$suffix.json")
  if [ "$which_torch" != debian ]; then
    for threads in 1 2; do
      echo "== pytorch (PyPI), $threads thread(s)"
      "$out/venv-torch/bin/python" tools/reference/dlrm_torch.py --train="$train_file" \
        --test="$test_file" --threads="$threads" --processes="$workers" \
        "${torch_model[@]}" >"$out/torch-pypi-$threads$suffix.json"
      results+=("$out/torch-pypi-$threads$suffix.json")
    done
  fi
  [ "$which_torch" = pypi ] || for blas in pthread openmp; do
    for threads in 1 2; do
      echo "== pytorch: openblas-$blas, $threads thread(s)"
      LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-$blas \
        /usr/bin/python3 tools/reference/dlrm_torch.py --train="$train_file" \
        --test="$test_file" --threads="$threads" --processes="$workers" \
        "${torch_model[@]}" >"$out/torch-$blas-$threads$suffix.json"
      results+=("$out/torch-$blas-$threads$suffix.json")
    done
  done
  results+=(--)
done

WORKER_FLAGS="$worker_flags" /usr/bin/python3 - "$data/meta.json" "${results[@]}" <<'PY'
import json, os, statistics, sys
meta = json.load(open(sys.argv[1]))
rounds, current = [], []
for arg in sys.argv[2:]:
    if arg == "--":
        rounds.append(current)
        current = []
    else:
        current.append(json.load(open(arg)))

def name_of(r):
    blas = r["blas"]
    if "openblas" in blas:
        blas = "openblas-openmp" if "openmp" in blas else "openblas-pthread"
    procs = r.get("processes", 1)
    ddp = f"DDP {procs} procs × " if procs > 1 else ""
    return f"pytorch {r['torch']} {blas}, {ddp}{r['threads']} thr"

median = statistics.median
ours_runs = [runs[0] for runs in rounds]
n = ours_runs[0].get("workers", 1)
label = "median of rounds" if len(rounds) > 1 else ""
print(f"\n{'implementation':<52} {'samples/s':>10} {'test AUC':>9} {'logloss':>8}  {label}")
flags = os.environ.get("WORKER_FLAGS", "")
ours = f"embedps {n} server(s) + {n} worker(s)" + (f" {flags}" if flags else "")
print(f"{ours:<52} "
      f"{median(r['samples_per_second'] for r in ours_runs):>10,.0f} "
      f"{ours_runs[0]['test_auc']:>9.5f} {ours_runs[0]['test_logloss']:>8.5f}")
for c in range(1, len(rounds[0])):
    runs = [rs[c] for rs in rounds]
    print(f"{name_of(runs[0]):<52} {median(r['samples_per_second'] for r in runs):>10,.0f} "
          f"{runs[0]['test_auc']:>9.5f} {runs[0]['test_logloss']:>8.5f}")
print(f"embedps keys pulled per sample: "
      f"{median(r['keys_pulled_per_sample'] for r in ours_runs):.2f} of "
      f"{ours_runs[0]['keys_per_sample']:.1f}"
      + (f" (+ {median(r['keys_hot_per_sample'] for r in ours_runs):.2f} "
         f"from {ours_runs[0]['hot_rows']:,} hot rows)"
         if ours_runs[0].get('hot_rows') else ""))
print(f"{'Bayes-optimal':<52} {'':>10} {meta['bayes_test_auc']:>9.5f} {meta['bayes_test_logloss']:>8.5f}")
ratios, bests = [], []
for runs in rounds:
    best = max(runs[1:], key=lambda r: r["samples_per_second"])
    bests.append(best)
    ratios.append(runs[0]["samples_per_second"] / best["samples_per_second"])
best = bests[-1]
procs = best.get("processes", 1)
print(f"\nfastest PyTorch: {best['torch']} ({best['blas']}, "
      + (f"DDP {procs} processes × " if procs > 1 else "")
      + f"{best['threads']} threads)")
if len(rounds) > 1:
    print("embedps / fastest PyTorch by round: "
          + ", ".join(f"{r:.2f}x" for r in ratios))
ours = ours_runs[-1]
print(f"embedps / fastest PyTorch samples/s: {median(ratios):.2f}x"
      f"   AUC difference: {ours['test_auc'] - best['test_auc']:+.5f}")
waits = [100 * r["pull_wait_seconds"] / r["train_seconds"] for r in ours_runs]
print(f"embedps worker 0 waited for Pulls {ours['pull_wait_seconds']:.2f} s of "
      f"{ours['train_seconds']:.2f} s "
      f"({median(waits):.1f}% of the steps"
      + (", median of rounds" if len(rounds) > 1 else "") + ")")
PY
