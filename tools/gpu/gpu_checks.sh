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
#  4. the DLRM job end to end (datagen, 1 ps_server, 1 ps_worker) on CUDA
#     and on the CPU with the same data and config: samples/s and test AUC
#     side by side; then the CUDA job with its tables across 4 ps_servers.
# Writes one log per step under OUTDIR and a summary (OUTDIR/summary.txt).
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
for t in device_gpu_test model_gpu_test nccl_gpu_test device_test model_test \
         nccl_communicator_test cpu_model_test data_parallel_test; do
  if ! command -v "$t" >/dev/null; then
    say "$t: not in the bundle"
    failed=1
    continue
  fi
  if "$t" >"$out/test_$t.log" 2>&1; then
    say "$t: PASSED ($(grep -c '^\[       OK \]' "$out/test_$t.log") ok, $(grep -c '^\[  SKIPPED \]' "$out/test_$t.log") skipped)"
  else
    say "$t: FAILED"
    grep -E '^\[  FAILED  \]|Failure|error' "$out/test_$t.log" | head -n 20 | tee -a "$summary"
    failed=1
  fi
done

say "== model_benchmark (FP32, then TF32)"
model_benchmark --devices=cpu,cuda --threads="$(nproc)" --seconds=2 \
  >"$out/model_benchmark_fp32.log" 2>&1 || failed=1
tee -a "$summary" <"$out/model_benchmark_fp32.log"
model_benchmark --devices=cuda --allow_tf32 --seconds=2 \
  >"$out/model_benchmark_tf32.log" 2>&1 || failed=1
tee -a "$summary" <"$out/model_benchmark_tf32.log"

say "== DLRM job (dlrm_large, 1 ps_server + 1 ps_worker): cuda vs cpu"
work=$(mktemp -d)
datagen --output_dir="$work/data" --train_rows=400000 --test_rows=50000 \
  --vocab=100,10000,300000,3000000 --seed=3 >"$out/datagen.log" 2>&1 || failed=1
# One job: DEVICE BATCH SERVERS (that many ps_server processes, the tables
# hash-partitioned across them).
run_job() {
  local device=$1 batch=$2 nservers=$3
  local run="$work/$device-$batch-$nservers" servers="" pids=() i rc
  mkdir -p "$run"
  for i in $(seq "$nservers"); do
    ps_server --host=127.0.0.1 --port=0 --metrics_port=-1 \
      --port_file="$run/port$i" --data_dir="$run/data$i" --log_level=warn \
      >"$run/server$i.log" 2>&1 &
    pids+=($!)
  done
  for i in $(seq "$nservers"); do
    for _ in $(seq 100); do [ -s "$run/port$i" ] && break; sleep 0.1; done
    servers="$servers${servers:+,}127.0.0.1:$(sed -n 1p "$run/port$i")"
  done
  local name="${device}_${batch}_${nservers}s"
  timeout 300 ps_worker --config=deploy/local/dlrm_large.txtpb \
    --servers="$servers" --device="$device" --batch_size="$batch" \
    --train_data="$work/data/train.txt" --test_data="$work/data/test.txt" \
    --bayes_metrics="$work/data/meta.json" --output_dir="$run/out" \
    --job_name="gpu-$name" --log_level=warn \
    >"$run/summary.json" 2>"$out/worker_$name.log"
  rc=$?
  kill -TERM "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  if [ "$rc" -ne 0 ]; then
    say "$device batch $batch, $nservers server(s): worker failed (rc $rc)"
    tail -n 5 "$out/worker_$name.log" | tee -a "$summary"
    failed=1
    return
  fi
  cp "$run/summary.json" "$out/summary_$name.json"
  python3 - "$run/summary.json" "$device" "$batch" "$nservers" <<'PY' | tee -a "$summary"
import json, sys
s = json.load(open(sys.argv[1]))
wait = s.get("pull_wait_seconds")
wait = f", pull wait {wait:.1f} s" if wait is not None else ""
print(f"{sys.argv[2]} batch {sys.argv[3]}, {sys.argv[4]} server(s): "
      f"{s['samples_per_second']:,.0f} samples/s, test AUC {s['test_auc']:.4f}, "
      f"{s['samples']:,} samples in {s['train_seconds']:.1f} s{wait}")
PY
}
for device in cuda cpu; do
  for batch in 512 4096; do
    run_job "$device" "$batch" 1
  done
done
say "== DLRM job on cuda with the tables across 4 ps_servers"
for batch in 512 4096; do
  run_job cuda "$batch" 4
done
rm -rf "$work"
say "== done: $([ $failed -eq 0 ] && echo all passed || echo FAILURES)"
exit $failed
