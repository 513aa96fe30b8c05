#include "dense/host_array.h"

#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace embedps::dense {

HostArray::HostArray(float* data, size_t size, Release release)
    : data_(data), size_(size), release_(release) {}

HostArray::HostArray(HostArray&& other) noexcept { *this = std::move(other); }

HostArray& HostArray::operator=(HostArray&& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(release_, other.release_);
  return *this;
}

HostArray::~HostArray() {
  if (data_ != nullptr) release_(data_);
}

absl::StatusOr<HostArray> NewPlainHostArray(size_t size) {
  if (size == 0) return HostArray();
  constexpr size_t kAlign = 64;
  if (size > (std::numeric_limits<size_t>::max() - kAlign) / sizeof(float)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a host array of ", size, " floats does not fit memory"));
  }
  const size_t bytes = (size * sizeof(float) + kAlign - 1) / kAlign * kAlign;
  void* data = std::aligned_alloc(kAlign, bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("could not allocate ", bytes, " bytes of host memory"));
  }
  return HostArray(static_cast<float*>(data), size,
                   [](void* p) { std::free(p); });
}

}  // namespace embedps::dense
