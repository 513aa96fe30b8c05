// device.h for builds without a CUDA toolkit.
#include "dense/device.h"

namespace embedps::dense {
namespace {

absl::Status NoCuda() {
  return absl::FailedPreconditionError(
      "this binary was built without CUDA (no toolkit under $CUDA_HOME or "
      "/usr/local/cuda at build time); use the CPU backend or rebuild on a "
      "machine with the CUDA toolkit");
}

}  // namespace

bool BuiltWithCuda() { return false; }

absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices() {
  return NoCuda();
}

absl::Status CheckCudaDevice(int) { return NoCuda(); }

}  // namespace embedps::dense
