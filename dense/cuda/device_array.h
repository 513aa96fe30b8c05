// DeviceArray: a grow-only array of device memory (cudaMalloc), freed with
// its owner. Resize keeps no contents when it grows.
//
// Thread safety: as a plain value; the caller keeps the device current.
#ifndef EMBEDPS_DENSE_CUDA_DEVICE_ARRAY_H_
#define EMBEDPS_DENSE_CUDA_DEVICE_ARRAY_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "dense/cuda/cuda_status.h"

namespace embedps::dense {

template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& other) noexcept { *this = std::move(other); }
  DeviceArray& operator=(DeviceArray&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
    return *this;
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }

  absl::Status Resize(size_t n) {
    if (n > capacity_) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = nullptr;
      capacity_ = 0;
      RETURN_IF_ERROR(
          CudaStatus(cudaMalloc(&data_, std::max<size_t>(n, 1) * sizeof(T)),
                     absl::StrCat("cudaMalloc of ", n * sizeof(T), " bytes")));
      capacity_ = n;
    }
    size_ = n;
    return absl::OkStatus();
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_CUDA_DEVICE_ARRAY_H_
