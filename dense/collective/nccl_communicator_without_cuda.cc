// nccl_communicator.h for builds without the CUDA toolkit.
#include "dense/collective/nccl_communicator.h"

namespace embedps::dense {

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclOptions&, Store*) {
  return absl::FailedPreconditionError(
      "this binary was built without CUDA, so without NCCL; use the Gloo "
      "communicator on CPU buffers");
}

}  // namespace embedps::dense
