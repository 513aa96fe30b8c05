// The device half of a dense optimizer step (dense/dense_update.h): the
// same elementwise rule as the host's loops, one thread an element.
// Pointers are device memory; the launch is asynchronous on `stream`.
#ifndef EMBEDPS_DENSE_CUDA_DENSE_OPTIMIZER_KERNELS_CUH_
#define EMBEDPS_DENSE_CUDA_DENSE_OPTIMIZER_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstddef>

#include "dense/dense_update.h"

namespace embedps::dense_cuda {

// parameters[i] (and the moments `first`, `second` the rule's kind keeps;
// null where it keeps none) updated by `rule` from gradients[i], i < n.
void LaunchDenseStep(const dense::DenseStepRule& rule, float* parameters,
                     const float* gradients, float* first, float* second,
                     size_t n, cudaStream_t stream);

}  // namespace embedps::dense_cuda

#endif  // EMBEDPS_DENSE_CUDA_DENSE_OPTIMIZER_KERNELS_CUH_
