#include "common/key_hash.h"

#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace embedps {
namespace {

TEST(KeyHashTest, Mix64SpreadsSequentialKeys) {
  std::set<uint64_t> seen;
  int top_bit_set = 0;
  for (uint64_t k = 0; k < 10000; ++k) {
    seen.insert(Mix64(k));
    top_bit_set += Mix64(k) >> 63;
  }
  EXPECT_EQ(seen.size(), 10000u);  // no collisions among small integers
  EXPECT_NEAR(top_bit_set, 5000, 300);
}

TEST(KeyHashTest, JumpHashStaysInRangeAndBalances) {
  constexpr int kShards = 7;
  std::vector<int> count(kShards, 0);
  for (uint64_t k = 0; k < 70000; ++k) {
    const int32_t shard = ShardOfKey(k, kShards);
    ASSERT_GE(shard, 0);
    ASSERT_LT(shard, kShards);
    ++count[shard];
  }
  for (int c : count) EXPECT_NEAR(c, 10000, 500);
  EXPECT_EQ(ShardOfKey(12345, 1), 0);
}

TEST(KeyHashTest, GrowingShardsMovesKeysOnlyToTheNewShard) {
  int moved = 0;
  constexpr int kKeys = 30000;
  for (uint64_t k = 0; k < kKeys; ++k) {
    const int32_t before = ShardOfKey(k, 3);
    const int32_t after = ShardOfKey(k, 4);
    if (before != after) {
      EXPECT_EQ(after, 3) << "key " << k << " moved between old shards";
      ++moved;
    }
  }
  EXPECT_NEAR(moved, kKeys / 4, kKeys / 40);
}

}  // namespace
}  // namespace embedps
