#!/usr/bin/env bash
# Prints one line: whether this build includes the CUDA targets. Uses the
# same rule as third_party/cuda/cuda_configure.bzl: nvcc and cuda_runtime.h
# under $CUDA_HOME, else /usr/local/cuda.
if [ "${EMBEDPS_CUDA:-auto}" = off ]; then
  echo "embedps: EMBEDPS_CUDA=off: CUDA targets are left out of this build"
  exit 0
fi
for root in ${CUDA_HOME:+"$CUDA_HOME"} /usr/local/cuda; do
  if [ -x "$root/bin/nvcc" ] && [ -f "$root/include/cuda_runtime.h" ]; then
    echo "embedps: CUDA toolkit at $root: CUDA targets are compiled and linked (GPU tests skip without a device)"
    exit 0
  fi
done
echo "embedps: no CUDA toolkit under \$CUDA_HOME or /usr/local/cuda: CUDA targets are left out of this build"
