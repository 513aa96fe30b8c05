// RowArena: a growable array of fixed-size rows in one virtual memory
// region, backed by transparent huge pages where the kernel allows.
//
// Why: a table's rows are read at random, so on 4 KiB pages nearly every
// row costs a TLB miss and a page walk (two-dimensional, and slow, inside a
// VM). With 2 MiB pages one TLB entry covers ~4000 rows of dim 64. The
// region grows with mremap, which moves page tables instead of copying rows.
//
// Thread safety: none; the owning stripe serialises access. Addresses are
// valid until the next Reserve (the region may move): hold row ids, not
// pointers, across calls that may grow the arena.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_ROW_ARENA_H_
#define EMBEDPS_EMBEDDING_INTERNAL_ROW_ARENA_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace embedps::embedding_internal {

class RowArena {
 public:
  // Rows of `row_bytes` bytes each; nothing is reserved until Reserve.
  // `huge_pages`: ask for transparent huge pages (the last one is then
  // committed whole: up to 2 MiB beyond the rows). REQUIRES: row_bytes is
  // a positive multiple of 16.
  RowArena(size_t row_bytes, bool huge_pages)
      : row_bytes_(row_bytes), huge_pages_(huge_pages) {}
  ~RowArena();
  RowArena(const RowArena&) = delete;
  RowArena& operator=(const RowArena&) = delete;

  // REQUIRES: id < capacity().
  char* row(uint64_t id) const { return base_ + id * row_bytes_; }

  // Rows that fit without growing.
  uint64_t capacity() const { return capacity_; }

  // Bytes of address space reserved (pages are committed on first touch).
  size_t reserved_bytes() const { return capacity_ * row_bytes_; }

  // Makes room for at least `rows` rows, growing geometrically; rows keep
  // their contents. RESOURCE_EXHAUSTED if the OS refuses the memory (the
  // arena is then unchanged).
  absl::Status Reserve(uint64_t rows);

  // Reserves room for `rows` rows and commits their pages now (zeroed by
  // the kernel) instead of at their first touch. RESOURCE_EXHAUSTED if the
  // OS refuses the memory (pages committed so far stay committed).
  absl::Status Commit(uint64_t rows);

  // Returns the pages wholly beyond the first `rows` rows to the OS (a
  // huge page is committed whole: up to 2 MiB past the last row). They
  // read as zeros when touched again. The reservation stays.
  void Release(uint64_t rows);

 private:
  const size_t row_bytes_;
  const bool huge_pages_;
  char* base_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_ROW_ARENA_H_
