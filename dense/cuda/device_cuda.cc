// device.h for builds with the CUDA toolkit.
#include <cuda_runtime.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "dense/cuda/cuda_status.h"
#include "dense/cuda/saxpy.cuh"
#include "dense/device.h"

namespace embedps::dense {
namespace {

// Frees device memory on scope exit.
struct DeviceBuffer {
  float* ptr = nullptr;
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

}  // namespace

bool BuiltWithCuda() { return true; }

absl::StatusOr<std::vector<CudaDeviceInfo>> ListCudaDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return CudaStatus(error, "no usable CUDA device");
  if (count == 0) return absl::FailedPreconditionError("no CUDA device found");
  std::vector<CudaDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    const cudaError_t e = cudaGetDeviceProperties(&prop, i);
    if (e != cudaSuccess) return CudaStatus(e, "cudaGetDeviceProperties");
    devices.push_back({i, prop.name, prop.major, prop.minor,
                       static_cast<uint64_t>(prop.totalGlobalMem)});
  }
  return devices;
}

absl::Status CheckCudaDevice(int ordinal) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return CudaStatus(error, "no usable CUDA device");
  if (ordinal < 0 || ordinal >= count) {
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA device ", ordinal, " does not exist (", count, " visible)"));
  }
  if ((error = cudaSetDevice(ordinal)) != cudaSuccess) {
    return CudaStatus(error, "cudaSetDevice");
  }
  constexpr int kN = 4099;  // not a multiple of the block size
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = 0.5f * i;
    y[i] = 1.0f - i;
  }
  DeviceBuffer dx, dy;
  const size_t bytes = sizeof(float) * kN;
  if ((error = cudaMalloc(&dx.ptr, bytes)) != cudaSuccess ||
      (error = cudaMalloc(&dy.ptr, bytes)) != cudaSuccess) {
    return CudaStatus(error, "cudaMalloc");
  }
  if ((error = cudaMemcpy(dx.ptr, x.data(), bytes, cudaMemcpyHostToDevice)) !=
          cudaSuccess ||
      (error = cudaMemcpy(dy.ptr, y.data(), bytes, cudaMemcpyHostToDevice)) !=
          cudaSuccess) {
    return CudaStatus(error, "cudaMemcpy to device");
  }
  error = static_cast<cudaError_t>(cuda::LaunchSaxpy(kN, 2.0f, dx.ptr, dy.ptr));
  if (error != cudaSuccess) return CudaStatus(error, "saxpy kernel launch");
  std::vector<float> result(kN);
  if ((error = cudaMemcpy(result.data(), dy.ptr, bytes,
                          cudaMemcpyDeviceToHost)) != cudaSuccess) {
    return CudaStatus(error, "cudaMemcpy from device");
  }
  for (int i = 0; i < kN; ++i) {
    const float want = 2.0f * x[i] + y[i];
    if (result[i] != want) {
      return absl::InternalError(absl::StrCat("saxpy on device ", ordinal,
                                              " gave ", result[i], " at ", i,
                                              ", want ", want));
    }
  }
  return absl::OkStatus();
}

}  // namespace embedps::dense
