// Which CUDA devices this process can use, and a check that one works.
//
// Host-only header: no CUDA types. Builds without a CUDA toolkit get an
// implementation that answers FAILED_PRECONDITION, so callers (the dense
// backends, ps_worker --device=cuda) can always link against it and fall
// back to the CPU with a clear message.
//
// Thread safety: all functions are thread-safe.
#ifndef EMBEDPS_DENSE_DEVICE_H_
#define EMBEDPS_DENSE_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace embedps::dense {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  uint64_t memory_bytes = 0;
};

// True if this binary was built with the CUDA toolkit.
bool BuiltWithCuda();

// The visible CUDA devices. FAILED_PRECONDITION, saying why, when the
// binary was built without CUDA, no driver is loaded, or no device exists.
absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices();

// Runs a small kernel (y = a·x + y over a few thousand floats) on device
// `ordinal` and compares the result with the CPU's: proves that driver,
// runtime and the compiled architectures fit this GPU. FAILED_PRECONDITION
// as above or for a bad ordinal; INTERNAL with the CUDA error otherwise.
absl::Status CheckCudaDevice(int ordinal);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_DEVICE_H_
