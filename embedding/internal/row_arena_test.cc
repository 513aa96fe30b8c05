#include "embedding/internal/row_arena.h"

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
