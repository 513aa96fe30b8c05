#include "embedding/internal/row_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/status_matchers.h"
#include "embedding/internal/huge_page_allocator.h"
#include "gtest/gtest.h"

namespace embedps::embedding_internal {
namespace {

TEST(RowArenaTest, GrowingKeepsEveryRow) {
  constexpr size_t kRowBytes = 48;
  RowArena arena(kRowBytes, /*huge_pages=*/true);
  EXPECT_EQ(arena.capacity(), 0u);
  for (uint64_t rows = 1; rows <= 200000; rows = rows * 3 + 1) {
    const uint64_t before = arena.capacity();
    ASSERT_OK(arena.Reserve(rows));
    ASSERT_GE(arena.capacity(), rows);
    for (uint64_t id = before; id < arena.capacity(); ++id) {
      std::memset(arena.row(id), static_cast<int>(id % 251), kRowBytes);
    }
  }
  for (uint64_t id = 0; id < arena.capacity(); id += 7) {
    for (size_t b = 0; b < kRowBytes; ++b) {
      ASSERT_EQ(static_cast<unsigned char>(arena.row(id)[b]), id % 251) << id;
    }
  }
  EXPECT_EQ(arena.reserved_bytes(), arena.capacity() * kRowBytes);
}

TEST(RowArenaTest, ImpossibleReservationIsAnErrorNotACrash) {
  RowArena arena(1 << 20, /*huge_pages=*/false);
  ASSERT_OK(arena.Reserve(4));
  EXPECT_THAT(
      arena.Reserve(uint64_t{1} << 40),
      ::embedps::testing::StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_GE(arena.capacity(), 4u);  // unchanged and usable
  std::memset(arena.row(3), 1, 1 << 20);
}

// Pages of [begin, begin + bytes) the kernel holds in memory (mincore).
size_t ResidentPages(const char* begin, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(begin) / page * page;
  const size_t pages =
      (reinterpret_cast<uintptr_t>(begin) + bytes - start + page - 1) / page;
  std::vector<unsigned char> resident(pages);
  if (mincore(reinterpret_cast<void*>(start), pages * page, resident.data()) !=
      0) {
    return 0;
  }
  size_t count = 0;
  for (unsigned char r : resident) count += r & 1;
  return count;
}

TEST(RowArenaTest, CommitMakesTheRowsPagesResidentBeforeAnyTouch) {
  constexpr size_t kRowBytes = 144;
  constexpr uint64_t kRows = 10000;  // ~1.4 MB
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (bool huge_pages : {false, true}) {
    SCOPED_TRACE(huge_pages ? "huge pages" : "small pages");
    RowArena reserved(kRowBytes, huge_pages);
    ASSERT_OK(reserved.Reserve(kRows));
    // Reserved only: address space, nothing resident yet.
    EXPECT_EQ(ResidentPages(reserved.row(0), kRows * kRowBytes), 0u);

    RowArena committed(kRowBytes, huge_pages);
    ASSERT_OK(committed.Commit(kRows));
    ASSERT_GE(committed.capacity(), kRows);
    EXPECT_EQ(ResidentPages(committed.row(0), kRows * kRowBytes),
              (kRows * kRowBytes + page - 1) / page);
    // Zeroed, and rows keep what is written as the arena grows.
    EXPECT_EQ(committed.row(kRows - 1)[kRowBytes - 1], 0);
    std::memset(committed.row(7), 7, kRowBytes);
    ASSERT_OK(committed.Reserve(committed.capacity() * 4));
    EXPECT_EQ(committed.row(7)[kRowBytes - 1], 7);
  }
}

TEST(RowArenaTest, ReleaseReturnsThePagesPastTheRowsAndKeepsTheRows) {
  constexpr size_t kRowBytes = 144;
  constexpr uint64_t kRows = 10000;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (bool huge_pages : {false, true}) {
    SCOPED_TRACE(huge_pages ? "huge pages" : "small pages");
    RowArena arena(kRowBytes, huge_pages);
    ASSERT_OK(arena.Commit(4 * kRows));
    for (uint64_t id = 0; id < kRows; ++id) {
      std::memset(arena.row(id), static_cast<int>(id % 251), kRowBytes);
    }
    arena.Release(kRows);
    const size_t used_pages = (kRows * kRowBytes + page - 1) / page;
    EXPECT_EQ(ResidentPages(arena.row(0), 4 * kRows * kRowBytes), used_pages);
    for (uint64_t id = 0; id < kRows; id += 13) {
      ASSERT_EQ(static_cast<unsigned char>(arena.row(id)[kRowBytes - 1]),
                id % 251);
    }
    // Rows past the released ones read as zeros and take writes.
    EXPECT_EQ(arena.row(2 * kRows)[0], 0);
    std::memset(arena.row(2 * kRows), 5, kRowBytes);
    EXPECT_EQ(arena.row(2 * kRows)[kRowBytes - 1], 5);
    RowArena empty(kRowBytes, huge_pages);
    empty.Release(0);  // nothing reserved: nothing to do
  }
}

TEST(RowArenaTest, CommittingRowsInUseKeepsTheirContents) {
  RowArena arena(64, /*huge_pages=*/false);
  ASSERT_OK(arena.Reserve(100));
  for (uint64_t id = 0; id < 100; ++id) std::memset(arena.row(id), 9, 64);
  ASSERT_OK(arena.Commit(5000));
  for (uint64_t id = 0; id < 100; ++id) ASSERT_EQ(arena.row(id)[63], 9) << id;
}

TEST(HugePageAllocatorTest, BigAndSmallAllocationsWork) {
  absl::flat_hash_set<uint64_t, absl::Hash<uint64_t>, std::equal_to<uint64_t>,
                      HugePageAllocator<uint64_t>>
      set;
  for (uint64_t i = 0; i < 1000000; ++i) set.insert(i * 7);
  for (uint64_t i = 0; i < 1000000; i += 1001) ASSERT_TRUE(set.contains(i * 7));
  std::vector<int, HugePageAllocator<int>> v(10, 3);
  EXPECT_EQ(v[9], 3);
}

}  // namespace
}  // namespace embedps::embedding_internal
