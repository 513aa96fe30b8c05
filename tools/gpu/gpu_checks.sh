#!/usr/bin/env bash
# The checks that need a CUDA device, run on a GPU machine from a bundle of
# binaries built elsewhere (tools/gpu/bundle.sh makes it; docs/build.md,
# "GPU machines"), from the repository root:
#
#   tar -xJf .gpubundle/gpu.tar.xz && . .gpu/env.sh && tools/gpu/gpu_checks.sh OUTDIR
#
#  1. the device and driver (nvidia-smi);
#  2. every gpu-tagged test and the CUDA-touching unit tests (device,
#     model parity CPU vs CUDA, NCCL), each with its log;
#  3. dense/model_benchmark: DLRM samples/s and MFU on the GPU next to the
#     CPU in the same run, FP32 and TF32;
#  4. the DLRM job end to end (datagen, 1 or 4 ps_servers, 1 ps_worker),
#     batch 4096 and 8192: on CUDA with the batch stages on the device, in
#     the same run with the hot-row tier (--hot_rows) and with the stages
#     on the host (--stages_on_host); then on the CPU. Samples/s (the whole
#     run, and from the step after the tier's first choice on), MFU, test
#     AUC, the time per step by stage, and the keys pulled per sample.
# Writes one log per step under OUTDIR and a summary (OUTDIR/summary.txt).
# For a short lease, the environment narrows it: TESTS (names), BENCHMARK=0,
# BATCHES (default "4096 8192"), SERVERS ("1 4"), TRAIN_ROWS (1000000),
# JOB_TIMEOUT (300 s), CPU_JOB=0, HOT_ROWS (the tier's rows, one run
# each: "300000"; 0: no tier runs), HOT_WARMUP (steps before its first
# choice, 10), HOST_STAGES=0, SERVER_FLAGS (more ps_server flags).
# Exits non-zero if a test failed or a job did not finish.
set -uo pipefail
out=${1:?usage: gpu_checks.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
summary="$out/summary.txt"
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
failed=0

say "== device"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
  --format=csv 2>&1 | tee -a "$summary"
say "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

say "== tests"
for t in ${TESTS:-device_gpu_test model_gpu_test cuda_dense_optimizer_gpu_test \
         nccl_gpu_test device_test \
         model_test nccl_communicator_test cpu_model_test data_parallel_test \
         unique_rows_test key_dedup_test}; do
  if ! command -v "$t" >/dev/null; then
    say "$t: not in the bundle"
    failed=1
    continue
  fi
  if "$t" >"$out/test_$t.log" 2>&1; then
    say "$t: PASSED ($(grep -c '^\[       OK \]' "$out/test_$t.log") ok, $(grep -c '^\[  SKIPPED \]' "$out/test_$t.log") skipped)"
  else
    say "$t: FAILED"
    grep -E -A4 '^\[  FAILED  \]|Failure|error' "$out/test_$t.log" | head -n 40 |
      tee -a "$summary"
    failed=1
  fi
done

if [ "${BENCHMARK:-1}" != 0 ]; then
say "== model_benchmark (FP32, then TF32)"
model_benchmark --devices=cpu,cuda --threads="$(nproc)" --seconds=2 \
  >"$out/model_benchmark_fp32.log" 2>&1 || failed=1
tee -a "$summary" <"$out/model_benchmark_fp32.log"
model_benchmark --devices=cuda --allow_tf32 --seconds=2 \
  >"$out/model_benchmark_tf32.log" 2>&1 || failed=1
tee -a "$summary" <"$out/model_benchmark_tf32.log"
say "== sync_apply_benchmark (a SYNC step's apply: 1 thread against 4, 8)"
for threads in 4 8; do
  sync_apply_benchmark --threads="$threads" --keys=200000 \
    >"$out/sync_apply_$threads.log" 2>&1 || failed=1
  tee -a "$summary" <"$out/sync_apply_$threads.log"
done
say "== key_dedup_benchmark (the worker's dedup at batch 8192: 1, 8 threads)"
for threads in 1 8; do
  key_dedup_benchmark --threads="$threads" >"$out/key_dedup_$threads.log" 2>&1 ||
    failed=1
  tee -a "$summary" <"$out/key_dedup_$threads.log"
done
fi

say "== DLRM job (dlrm_large, ps_servers on this host + 1 ps_worker)"
work=$(mktemp -d)
datagen --output_dir="$work/data" --train_rows="${TRAIN_ROWS:-1000000}" \
  --test_rows=50000 --vocab=100,10000,300000,3000000 --seed=3 \
  >"$out/datagen.log" 2>&1 || failed=1
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
# One job: DEVICE BATCH SERVERS LABEL [worker flags...] (SERVERS ps_server
# processes, the tables hash-partitioned across them).
run_job() {
  local device=$1 batch=$2 nservers=$3 label=$4
  shift 4
  local run="$work/$label-$batch-$nservers" servers="" pids=() i rc
  mkdir -p "$run"
  for i in $(seq "$nservers"); do
    ps_server --host=127.0.0.1 --port=0 --metrics_port=-1 \
      --shard_index=$((i - 1)) --num_shards="$nservers" \
      --port_file="$run/port$i" --data_dir="$run/data$i" --log_level=warn \
      ${SERVER_FLAGS:-} \
      >"$run/server$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq "$nservers"); do
    for _ in $(seq 100); do [ -s "$run/port$i" ] && break; sleep 0.1; done
    servers="$servers${servers:+,}127.0.0.1:$(sed -n 1p "$run/port$i")"
  done
  local name="${label}_${batch}_${nservers}s"
  timeout "${JOB_TIMEOUT:-300}" ps_worker --config=deploy/local/dlrm_large.txtpb \
    --servers="$servers" --device="$device" --batch_size="$batch" \
    --train_data="$work/data/train.txt" --test_data="$work/data/test.txt" \
    --bayes_metrics="$work/data/meta.json" --output_dir="$run/out" \
    --job_name="gpu-$name" --log_level=warn --log_every=5 "$@" \
    >"$run/summary.json" 2>"$out/worker_$name.log"
  rc=$?
  kill -TERM "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  if [ "$rc" -ne 0 ]; then
    say "$label batch $batch, $nservers server(s): worker failed (rc $rc)"
    tail -n 8 "$out/worker_$name.log" | tee -a "$summary"
    failed=1
    return
  fi
  cp "$run/summary.json" "$out/summary_$name.json"
  python3 - "$run/summary.json" "$label" "$batch" "$nservers" "$gpu_name" \
    "$device" "$run/out/history.csv" "${HOT_WARMUP:-10}" <<'PY' | tee -a "$summary"
import csv, json, sys
s = json.load(open(sys.argv[1]))
label, batch, nservers, gpu, device = sys.argv[2:7]
# The rate from the first progress line past the tier's first choice on
# (the whole run's includes the steps before it, and the choice).
rows = [r for r in csv.reader(open(sys.argv[7])) if r and r[0].isdigit() and r[1]]
from_step = int(sys.argv[8]) + 5
later = [r for r in rows if int(r[0]) >= from_step]
steady = ""
if len(later) >= 2:
    a, b = later[0], later[-1]
    steady = (f", {(int(b[1]) - int(a[1])) / (float(b[6]) - float(a[6])):,.0f} "
              f"samples/s from step {a[0]}")
# NVIDIA data sheets, dense FP32 (the job runs without TF32).
peaks = [("H100 PCIe", 51.2), ("H100", 66.9), ("H200", 66.9), ("A100", 19.5)]
peak = next((p for n, p in peaks if n in gpu), 0) if device == "cuda" else 0
sps = s["samples_per_second"]
mfu = f", MFU {100 * sps * s['flops_per_sample'] / (peak * 1e12):.2f}%" if peak else ""
steps = max(s["steps"], 1)
per = lambda k: 1000 * s[k] / steps
print(f"{label} batch {batch}, {nservers} server(s): {sps:,.0f} samples/s{mfu}{steady}, "
      f"test AUC {s['test_auc']:.4f}, {s['samples']:,} samples in "
      f"{s['train_seconds']:.1f} s; per step (ms): read {per('read_seconds'):.1f}, "
      f"prepare {per('prepare_seconds'):.1f}, pull wait {per('pull_wait_seconds'):.1f}, "
      f"compute {per('compute_seconds'):.1f}, push wait {per('push_seconds'):.1f}; "
      f"keys pulled/sample {s['keys_pulled_per_sample']:.2f} of {s['keys_per_sample']:.1f}"
      f" (+ {s['keys_hot_per_sample']:.2f} from {s['hot_rows']:,} hot rows, "
      f"{s['hot_rows_seconds']:.1f} s choosing and writing them back)")
PY
}
# The device's stages against the host's, same data, same lease.
for nservers in ${SERVERS:-1 4}; do
  for batch in ${BATCHES:-4096 8192}; do
    run_job cuda "$batch" "$nservers" cuda --blas_threads="$(nproc)"
    for hot in ${HOT_ROWS:-300000}; do
      [ "$hot" = 0 ] && continue
      run_job cuda "$batch" "$nservers" "cuda-hot$hot" --blas_threads="$(nproc)" \
        --hot_rows="$hot" --hot_rows_warmup_steps="${HOT_WARMUP:-10}"
    done
    if [ "${HOST_STAGES:-1}" != 0 ]; then
      run_job cuda "$batch" "$nservers" cuda-host-stages --stages_on_host \
        --blas_threads="$(nproc)"
    fi
  done
done
if [ "${CPU_JOB:-1}" != 0 ]; then
  say "== the same job on the host's $(nproc) cores (60 steps)"
  run_job cpu 4096 4 cpu --max_steps=60 --blas_threads="$(nproc)"
fi
rm -rf "$work"
say "== done: $([ $failed -eq 0 ] && echo all passed || echo FAILURES)"
exit $failed
