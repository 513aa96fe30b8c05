#include "embedding/internal/row_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace embedps::embedding_internal {
namespace {

// The first reservation; later ones double.
constexpr size_t kInitialBytes = 64 * 1024;

}  // namespace

RowArena::~RowArena() {
  if (base_ != nullptr) munmap(base_, reserved_bytes());
}

absl::Status RowArena::Reserve(uint64_t rows) {
  if (rows <= capacity_) return absl::OkStatus();
  uint64_t new_capacity = std::max<uint64_t>(
      capacity_ == 0 ? kInitialBytes / row_bytes_ : capacity_ * 2, 8);
  while (new_capacity < rows) new_capacity *= 2;
  if (new_capacity > (uint64_t{1} << 48) / row_bytes_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", new_capacity, " rows of ", row_bytes_,
                     " bytes: beyond the address space"));
  }
  const size_t new_bytes = new_capacity * row_bytes_;
  void* region =
      base_ == nullptr
          ? mmap(nullptr, new_bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
          : mremap(base_, reserved_bytes(), new_bytes, MREMAP_MAYMOVE);
  if (region == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot reserve ", new_bytes, " bytes for ", new_capacity,
                     " rows: ", std::strerror(errno)));
  }
  // Advice only: where THP is off this fails harmlessly and pages stay small.
  if (huge_pages_) madvise(region, new_bytes, MADV_HUGEPAGE);
  base_ = static_cast<char*>(region);
  capacity_ = new_capacity;
  return absl::OkStatus();
}

absl::Status RowArena::Commit(uint64_t rows) {
  RETURN_IF_ERROR(Reserve(rows));
  const size_t bytes = rows * row_bytes_;
  if (bytes == 0) return absl::OkStatus();
  // Page tables filled writable, huge pages where advised (Linux 5.14+).
  if (madvise(base_, bytes, MADV_POPULATE_WRITE) == 0) return absl::OkStatus();
  if (errno != EINVAL) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot commit ", bytes, " bytes for ", rows,
                     " rows: ", std::strerror(errno)));
  }
  // An older kernel: a write a page, of the byte already there.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  volatile char* base = base_;
  for (size_t offset = 0; offset < bytes; offset += page) {
    base[offset] = base[offset];
  }
  return absl::OkStatus();
}

void RowArena::Release(uint64_t rows) {
  if (base_ == nullptr) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t used = std::min<size_t>(rows, capacity_) * row_bytes_;
  const size_t from = (used + page - 1) / page * page;
  if (from >= reserved_bytes()) return;
  // Advice: where it fails the pages simply stay committed.
  madvise(base_ + from, reserved_bytes() - from, MADV_DONTNEED);
}

}  // namespace embedps::embedding_internal
