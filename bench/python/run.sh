#!/usr/bin/env bash
# The Python benchmark of docs/benchmarks.md, all configurations in one run
# on this machine, printed side by side:
#   (a) a PyTorch loop with embedps tables (embedps.torch), 1 worker + 1 ps_server
#   (a') the same with the collection's hot-row tier (--hot_rows rows a table)
#   (b) pure PyTorch: local nn.EmbeddingBag, sparse Adagrad
#   ((a), (a') and (b) in --rounds alternating rounds: medians, the ratio by
#   round, and the server's CPU seconds a step)
#   (c) ps_worker (C++), 1 worker + 1 ps_server
#   (d) TorchRec on CPU (EmbeddingBagCollection, fused Adagrad through DMP)
#   and the Python cost of a pull + push pair at batch 512;
#   then a small two-tower model (bench_two_tower.py) on schema_datagen's
#   multi-hot set, with embedps tables and with local EmbeddingBags, in
#   alternating rounds, with the time a step spends in each part.
# Same model (deploy/local/dlrm_large.txtpb: dim 64, bottom 512-256-64, top
# 512-256), data (datagen --vocab=100,10000,300000,3000000) and optimizers.
#
#   bench/python/run.sh [--rows=N] [--steps=N] [--work=DIR] [--part=all|dlrm|two_tower] [--rounds=3]
#                       [--hot_rows=100000]
#
# (a), (b) use PyPI's current torch (2.15) in WORK/venv; TorchRec 1.9.2 needs
# the torch it was built for (2.14), in WORK/venv-torchrec. Both venvs are
# made on the first run (several GB: the torch wheels pull CUDA libraries).
# Never part of tests/run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
rows=1000000
steps=1900
warmup=20
work=bench/python/work
part=all
rounds=3
hot_rows=100000
for arg in "$@"; do
  case "$arg" in
    --rows=*) rows="${arg#*=}" ;;
    --steps=*) steps="${arg#*=}" ;;
    --work=*) work="${arg#*=}" ;;
    --part=*) part="${arg#*=}" ;;
    --rounds=*) rounds="${arg#*=}" ;;
    --hot_rows=*) hot_rows="${arg#*=}" ;;
    *) echo "unknown argument $arg" >&2; exit 2 ;;
  esac
done
mkdir -p "$work"
work=$(cd "$work" && pwd)
python=$(command -v python3)

if [ ! -x "$work/venv/bin/python" ]; then
  echo "== venv with PyPI's torch 2.15: $work/venv"
  "$python" -m venv "$work/venv"
  "$work/venv/bin/pip" install -q "torch==2.15.*" numpy pytest
fi
if [ "$part" != two_tower ] && [ ! -x "$work/venv-torchrec/bin/python" ]; then
  echo "== venv with TorchRec 1.9.2 (torch 2.14, FBGEMM CPU): $work/venv-torchrec"
  "$python" -m venv "$work/venv-torchrec"
  "$work/venv-torchrec/bin/pip" install -q "torch==2.14.*" numpy torchrec==1.9.2
  # torchrec pulls FBGEMM's CUDA build, which needs libnvidia-ml: use the CPU one.
  "$work/venv-torchrec/bin/pip" uninstall -y -q fbgemm_gpu || true
  "$work/venv-torchrec/bin/pip" install -q --no-deps --force-reinstall fbgemm-gpu-cpu==1.9.0
fi

bazel build --color=no --curses=no //python:embedps //server:ps_server //worker:ps_worker \
  //tools:datagen //tools:schema_datagen 2>&1 | tail -n 1
data="$work/data-$rows"
if [ "$part" != two_tower ] && [ ! -f "$data/train.txt" ]; then
  bazel-bin/tools/datagen --output_dir="$data" --train_rows="$rows" --test_rows=1000 \
    --vocab=100,10000,300000,3000000
fi
export PYTHONPATH="$PWD/bazel-bin/python/site"
logs="$work/logs"
mkdir -p "$logs"
server_pid=""
start_server() {
  rm -f "$work/port"
  bazel-bin/server/ps_server --port=0 --port_file="$work/port" --log_level=warn \
    >"$logs/server.log" 2>&1 &
  server_pid=$!
  while [ ! -s "$work/port" ]; do sleep 0.05; done
  server="127.0.0.1:$(head -n 1 "$work/port")"
}
# The server's CPU seconds (user + system) so far.
server_cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$server_pid/stat"; }
stop_server() { kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; }
# An (a) run's JSON line with the server's CPU seconds added.
run_a() {
  start_server
  local r
  r=$(bench "$work/venv/bin/python" bench/python/bench_dlrm.py --which=embedps --servers="$server" "$@")
  "$work/venv/bin/python" -c 'import json, sys; r = json.loads(sys.argv[1]); r["server_cpu_s"] = float(sys.argv[2]); print(json.dumps(r))' \
    "$r" "$(server_cpu)"
  stop_server
}
trap stop_server EXIT
bench() { "$@" --data="$data" --steps="$steps" --warmup="$warmup" 2>>"$logs/bench.log" | tail -n 1; }

if [ "$part" != two_tower ]; then
# (a), (a') and (b) in alternating rounds (the machine's noise moves all).
a_runs=()
h_runs=()
b_runs=()
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds: (b) pure PyTorch, (a) PyTorch with embedps tables, (a') with the tier"
  b_runs+=("$(bench "$work/venv/bin/python" bench/python/bench_dlrm.py --which=torch)")
  echo "${b_runs[-1]}"
  a_runs+=("$(run_a)")
  echo "${a_runs[-1]}"
  h_runs+=("$(run_a --hot_rows="$hot_rows")")
  echo "${h_runs[-1]}"
done
start_server
o=$("$work/venv/bin/python" bench/python/bench_dlrm.py --which=overhead --servers="$server" \
  --data="$data" 2>>"$logs/bench.log" | tail -n 1)
echo "$o"
stop_server
echo "== (c) ps_worker"
start_server
c=$(bazel-bin/worker/ps_worker --config=deploy/local/dlrm_large.txtpb --servers="$server" \
  --mode=async --train_data="$data/train.txt" --test_data="$data/test.txt" \
  --max_steps=$((steps + warmup)) --log_level=warn 2>"$logs/worker.log" | tail -n 1)
stop_server
echo "== (d) TorchRec on CPU"
d=$(bench "$work/venv-torchrec/bin/python" bench/python/bench_dlrm.py --which=torchrec) ||
  d='{"which": "torchrec", "error": "see '"$logs"'/bench.log"}'
echo "$d"

"$work/venv/bin/python" - "$c" "$d" "$o" "${a_runs[@]}" "${h_runs[@]}" "${b_runs[@]}" <<'PY'
import json, statistics, sys
c, d, o, *runs = (json.loads(x) for x in sys.argv[1:])
n = len(runs) // 3
a_runs, h_runs, b_runs = runs[:n], runs[n:2 * n], runs[2 * n:]
median = lambda rs: statistics.median(r["samples_per_second"] for r in rs)
ratios = [a["samples_per_second"] / b["samples_per_second"] for a, b in zip(a_runs, b_runs)]
hot_ratios = [h["samples_per_second"] / b["samples_per_second"] for h, b in zip(h_runs, b_runs)]
# The server's CPU a step (the timed steps and the warmup).
cpu_ms = lambda rs: statistics.median(1000 * r["server_cpu_s"] / (r["steps"] + r["warmup"]) for r in rs)
b = b_runs[0]
base = median(b_runs)
print(f"\nPython benchmark: model large, batch {b['batch_size']}, {b['steps']} steps after warmup, "
      f"{b['distinct_keys']} distinct keys trained on; (a) and (b): medians of {len(ratios)} "
      "alternating rounds")
print(f"{'configuration':44} {'torch':14} {'samples/s':>10} {'vs (b)':>7}")
for name, rate, version in (
        ("(a) PyTorch + embedps tables, 1 server", median(a_runs), a_runs[0]["torch"]),
        (f"(a') the same, hot-row tier of {h_runs[0]['hot_rows']:,}", median(h_runs), h_runs[0]["torch"]),
        ("(b) PyTorch, local EmbeddingBag", base, b["torch"]),
        ("(c) ps_worker (C++), 1 server", c.get("samples_per_second"), "-"),
        ("(d) TorchRec CPU (fused Adagrad)", d.get("samples_per_second"), d.get("torch", "-"))):
    if rate is None:
        print(f"{name:44} {version:14} {'failed':>10}")
    else:
        print(f"{name:44} {version:14} {rate:10.0f} {rate / base:7.2f}x")
print(f"(a)/(b) by round: {', '.join(f'{x:.2f}' for x in ratios)}; "
      f"median {statistics.median(ratios):.2f} (target >= 0.9)")
print(f"(a')/(b) by round: {', '.join(f'{x:.2f}' for x in hot_ratios)}; "
      f"median {statistics.median(hot_ratios):.2f}; the tier held {h_runs[0]['hot_rows_held']:,} rows")
print(f"server CPU a step: (a) {cpu_ms(a_runs):.1f} ms, (a') {cpu_ms(h_runs):.1f} ms")
print(f"pull+push pair of {o['distinct_keys']} keys: Python adds {o['binding_overhead_us']:.1f} us "
      f"(p90 {o['binding_overhead_p90_us']:.1f} us; target < 50) to the C++ calls inside it; "
      f"loops: Python {o['python_pair_us']:.0f} us vs C++ {o['cpp_pair_us']:.0f} us a pair")
PY
fi

[ "$part" != dlrm ] || exit 0
# The two-tower model: --rounds rounds, each PyTorch then embedps (a fresh server).
tt_data="$work/schema-330000"
[ -s "$tt_data/meta.json" ] || bazel-bin/tools/schema_datagen --output_dir="$tt_data" \
  --train_rows=330000 --test_rows=1000 >/dev/null
tt=()
for round in $(seq 1 "$rounds"); do
  echo "== two-tower, round $round of $rounds"
  tt+=("$("$work/venv/bin/python" bench/python/bench_two_tower.py --which=torch --data="$tt_data" \
    2>>"$logs/bench.log" | tail -n 1)")
  start_server
  tt+=("$("$work/venv/bin/python" bench/python/bench_two_tower.py --which=embedps \
    --servers="$server" --data="$tt_data" 2>>"$logs/bench.log" | tail -n 1)")
  stop_server
done
"$work/venv/bin/python" - "${tt[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(x) for x in sys.argv[1:]]
torch_runs, ours = runs[0::2], runs[1::2]
ratios = [o["samples_per_second"] / t["samples_per_second"] for t, o in zip(torch_runs, ours)]
r = ours[0]
print(f"\nTwo-tower: {r['user_slots']} + {r['item_slots']} slots, dim 16, towers 64-32, batch "
      f"{r['batch_size']}, {r['steps']} steps, {r['distinct_keys']} distinct keys, torch {r['torch']}")
for name, rs in (("PyTorch, local EmbeddingBags", torch_runs), ("PyTorch + embedps tables, 1 server", ours)):
    parts = {k: statistics.median(x["ms_a_step"][k] for x in rs) for k in rs[0]["ms_a_step"]}
    print(f"  {name:36} {statistics.median(x['samples_per_second'] for x in rs):9,.0f} samples/s; ms a step: "
          + ", ".join(f"{k[:-3]} {v:.2f}" for k, v in parts.items()))
print(f"  embedps / PyTorch by round: {', '.join(f'{x:.2f}x' for x in ratios)} "
      f"(median {statistics.median(ratios):.2f}x)")
PY
