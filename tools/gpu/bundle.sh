#!/usr/bin/env bash
# Builds what tools/gpu/gpu_checks.sh runs and packs it, with the shared
# libraries it loads (all but glibc's and CUDA's), into one compressed file
# that can travel to a GPU machine which has CUDA, cuBLAS and NCCL but none
# of our Debian libraries:
#
#   tools/gpu/bundle.sh [DEST]        # default .gpubundle/gpu.tar.xz
#
# On the GPU machine, from the repository root:
#   tar -xJf .gpubundle/gpu.tar.xz && . .gpu/env.sh && tools/gpu/gpu_checks.sh OUT
# Debug sections are stripped (the bundle is ~17 MB compressed).
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-.gpubundle/gpu.tar.xz}
targets=(//dense:device_gpu_test //dense:model_gpu_test
         //dense/cuda:cuda_dense_optimizer_gpu_test
         //dense/collective:nccl_gpu_test //dense:device_test //dense:model_test
         //dense/collective:nccl_communicator_test //dense:cpu_model_test
         //dense:data_parallel_test //dense:model_benchmark //server:ps_server
         //worker:ps_worker //tools:datagen //dense:unique_rows_test
         //worker:key_dedup_test //server:sync_apply_benchmark
         //worker:key_dedup_benchmark)
bazel build --color=no --curses=no "${targets[@]}" 2>&1 | tail -n 1
bins=()
for t in "${targets[@]}"; do
  bins+=("bazel-bin/$(echo "${t#//}" | tr : /)")
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/.gpu/bin" "$stage/.gpu/lib"
for bin in "${bins[@]}"; do
  cp -Lf "$bin" "$stage/.gpu/bin/"
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libresolv.so*) ;;
      libcuda.so*|libcudart.so*|libcublas*|libnccl*|libcudnn*|libnvidia*) ;;
      *) cp -Lf "$lib" "$stage/.gpu/lib/" ;;
    esac
  done
done
chmod -R u+w "$stage/.gpu"
strip --strip-debug "$stage"/.gpu/bin/* "$stage"/.gpu/lib/*
cp tools/gpu/env.sh "$stage/.gpu/env.sh"
mkdir -p "$(dirname "$dest")"
tar -C "$stage" -cf - .gpu | xz -T2 -6 >"$dest"
echo "bundle: $dest ($(du -h "$dest" | cut -f1))"
