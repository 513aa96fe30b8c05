// CUDA runtime and cuBLAS errors as absl::Status, in one place for every
// file of dense/ that calls CUDA: FAILED_PRECONDITION where no usable
// device or driver exists (do not retry; use the CPU), INTERNAL otherwise.
// Thread safety: pure functions.
#ifndef EMBEDPS_DENSE_CUDA_CUDA_STATUS_H_
#define EMBEDPS_DENSE_CUDA_CUDA_STATUS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace embedps::dense {

// OK for cudaSuccess; otherwise "<what>: <error name> (<description>)".
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// OK for CUBLAS_STATUS_SUCCESS; otherwise "<what>: <cuBLAS status>".
absl::Status CublasStatus(cublasStatus_t status, absl::string_view what);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_CUDA_CUDA_STATUS_H_
