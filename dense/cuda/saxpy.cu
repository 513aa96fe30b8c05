#include <cuda_runtime.h>

#include <algorithm>

#include "dense/cuda/saxpy.cuh"

namespace embedps::dense::cuda {
namespace {

__global__ void Saxpy(int n, float a, const float* __restrict__ x,
                      float* __restrict__ y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += blockDim.x * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

}  // namespace

int LaunchSaxpy(int n, float a, const float* x, float* y) {
  constexpr int kThreads = 256;
  const int blocks = (n + kThreads - 1) / kThreads;
  const int grid = std::min(std::max(blocks, 1), 1024);
  Saxpy<<<grid, kThreads>>>(n, a, x, y);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace embedps::dense::cuda
