// HostArray: floats in host memory that came from a particular allocator,
// and go back to it. A model hands these out (Model::NewHostArray) for the
// batches and row gradients it copies: page-locked memory for the CUDA
// backend, whose copies then run as DMA at the bus's speed instead of
// through the driver's staging buffers; plain memory for the CPU backend.
//
// Move-only; an empty array (the default) has no memory. Not thread-safe
// beyond what a plain buffer is.
#ifndef EMBEDPS_DENSE_HOST_ARRAY_H_
#define EMBEDPS_DENSE_HOST_ARRAY_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace embedps::dense {

class HostArray {
 public:
  // Gives `data` back to its allocator; never null.
  using Release = void (*)(void* data);

  HostArray() = default;
  // Takes `data` (`size` floats, null only when size is 0), released with
  // `release`.
  HostArray(float* data, size_t size, Release release);
  HostArray(const HostArray&) = delete;
  HostArray& operator=(const HostArray&) = delete;
  HostArray(HostArray&& other) noexcept;
  HostArray& operator=(HostArray&& other) noexcept;
  ~HostArray();

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  absl::Span<float> span() { return {data_, size_}; }
  absl::Span<const float> span() const { return {data_, size_}; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
  Release release_ = nullptr;
};

// `size` floats of plain host memory, 64-byte aligned, uninitialized.
// RESOURCE_EXHAUSTED when the memory cannot be had.
absl::StatusOr<HostArray> NewPlainHostArray(size_t size);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_HOST_ARRAY_H_
