// cuda_model.h for builds without the CUDA toolkit.
#include "dense/cuda_model.h"

namespace embedps::dense {

absl::StatusOr<std::unique_ptr<Model>> CreateCudaModel(const ModelSpec&,
                                                       const ModelOptions&) {
  return absl::FailedPreconditionError(
      "the CUDA backend is not available: this binary was built without the "
      "CUDA toolkit (see docs/build.md); use --device=cpu");
}

}  // namespace embedps::dense
