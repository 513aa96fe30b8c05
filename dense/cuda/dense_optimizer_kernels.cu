#include <algorithm>

#include "dense/cuda/dense_optimizer_kernels.cuh"

namespace embedps::dense_cuda {
namespace {

using dense::DenseStepRule;

constexpr int kThreads = 256;

// A grid-stride loop; the rule's kind is the same for every thread.
__global__ void DenseStepKernel(DenseStepRule rule, float* __restrict__ p,
                                const float* __restrict__ g,
                                float* __restrict__ first,
                                float* __restrict__ second, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    switch (rule.kind) {
      case DenseStepRule::Kind::kSgd:
        dense::SgdUpdate(rule, p[i], g[i]);
        break;
      case DenseStepRule::Kind::kSgdMomentum:
        dense::SgdMomentumUpdate(rule, p[i], g[i], first[i]);
        break;
      case DenseStepRule::Kind::kAdam:
        dense::AdamUpdate(rule, p[i], g[i], first[i], second[i]);
        break;
      case DenseStepRule::Kind::kAdamW:
        dense::AdamWUpdate(rule, p[i], g[i], first[i], second[i]);
        break;
    }
  }
}

}  // namespace

void LaunchDenseStep(const DenseStepRule& rule, float* parameters,
                     const float* gradients, float* first, float* second,
                     size_t n, cudaStream_t stream) {
  if (n == 0) return;
  // Enough blocks to fill any current GPU; the loop covers the rest.
  const size_t blocks =
      std::min<size_t>((n + kThreads - 1) / kThreads, size_t{4096});
  DenseStepKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      rule, parameters, gradients, first, second, n);
}

}  // namespace embedps::dense_cuda
