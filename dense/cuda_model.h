// The CUDA backend of Model (model.h): cuBLAS for the GEMMs, kernels of
// our own (dense/cuda/*.cu) for bias, ReLU, pooling, interaction and loss.
// Host-only header. Builds without the CUDA toolkit link an implementation
// that answers FAILED_PRECONDITION.
//
// Thread safety: as Model.
#ifndef EMBEDPS_DENSE_CUDA_MODEL_H_
#define EMBEDPS_DENSE_CUDA_MODEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "dense/model.h"

namespace embedps::dense {

// REQUIRES: ValidateModelSpec(spec).ok(). FAILED_PRECONDITION without
// CUDA or without device options.device; INTERNAL for other CUDA errors.
absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(
    const ModelSpec& spec, const ModelOptions& options);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_CUDA_MODEL_H_
