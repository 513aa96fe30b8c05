#include "worker/key_dedup.h"

#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::worker {
namespace {

// Checks the contract: every table's list holds its slots' distinct keys
// once, and every index names its key.
void ExpectDeduplicated(const std::vector<int>& slot_table,
                        const std::vector<std::vector<uint64_t>>& keys,
                        const std::vector<std::vector<uint64_t>>& unique,
                        const std::vector<std::vector<int32_t>>& index) {
  std::vector<std::set<uint64_t>> want(unique.size());
  for (size_t s = 0; s < keys.size(); ++s) {
    want[slot_table[s]].insert(keys[s].begin(), keys[s].end());
    ASSERT_EQ(index[s].size(), keys[s].size());
    for (size_t k = 0; k < keys[s].size(); ++k) {
      const std::vector<uint64_t>& list = unique[slot_table[s]];
      ASSERT_GE(index[s][k], 0);
      ASSERT_LT(static_cast<size_t>(index[s][k]), list.size());
      ASSERT_EQ(list[index[s][k]], keys[s][k]) << "slot " << s << " key " << k;
    }
  }
  for (size_t t = 0; t < unique.size(); ++t) {
    EXPECT_EQ(unique[t].size(), want[t].size()) << "table " << t;
    EXPECT_EQ(std::set<uint64_t>(unique[t].begin(), unique[t].end()), want[t]);
  }
}

TEST(KeyDeduplicatorTest, SmallBatchesKeepFirstSeenOrder) {
  KeyDeduplicator dedup({0, 1, 0}, 2, 4);
  const std::vector<std::vector<uint64_t>> keys = {{5, 3, 5}, {3}, {7, 3}};
  std::vector<absl::Span<const uint64_t>> spans(keys.begin(), keys.end());
  std::vector<std::vector<uint64_t>> unique;
  std::vector<std::vector<int32_t>> index;
  dedup.Run(spans, unique, index);
  EXPECT_EQ(unique[0], (std::vector<uint64_t>{5, 3, 7}));
  EXPECT_EQ(unique[1], (std::vector<uint64_t>{3}));
  EXPECT_EQ(index[0], (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(index[1], (std::vector<int32_t>{0}));
  EXPECT_EQ(index[2], (std::vector<int32_t>{2, 1}));
}

TEST(KeyDeduplicatorTest, LargeBatchesOverThreadsMeetTheContract) {
  std::mt19937_64 random(3);
  const std::vector<int> slot_table = {0, 0, 1, 0, 2, 1};
  std::vector<std::vector<uint64_t>> keys(slot_table.size());
  for (size_t s = 0; s < keys.size(); ++s) {
    // Skewed ids, strided ones and huge ones: repeats within and across
    // slots.
    for (int i = 0; i < 40000; ++i) {
      const uint64_t r = random();
      keys[s].push_back(i % 3 == 0   ? r % 1000
                        : i % 3 == 1 ? (r % 20000) * 4096
                                     : r);
    }
  }
  std::vector<absl::Span<const uint64_t>> spans(keys.begin(), keys.end());
  for (int threads : {1, 2, 5, 8}) {
    KeyDeduplicator dedup(slot_table, 3, threads);
    std::vector<std::vector<uint64_t>> unique;
    std::vector<std::vector<int32_t>> index;
    // Twice: the maps are reused.
    for (int run = 0; run < 2; ++run) {
      dedup.Run(spans, unique, index);
      ExpectDeduplicated(slot_table, keys, unique, index);
    }
  }
}

TEST(KeyDeduplicatorTest, EmptySlotsAndTablesWithoutKeys) {
  KeyDeduplicator dedup({0, 0}, 3, 2);
  const std::vector<std::vector<uint64_t>> keys = {{}, {9}};
  std::vector<absl::Span<const uint64_t>> spans(keys.begin(), keys.end());
  std::vector<std::vector<uint64_t>> unique;
  std::vector<std::vector<int32_t>> index;
  dedup.Run(spans, unique, index);
  ASSERT_EQ(unique.size(), 3u);
  EXPECT_EQ(unique[0], (std::vector<uint64_t>{9}));
  EXPECT_TRUE(unique[1].empty());
  EXPECT_TRUE(index[0].empty());
}

}  // namespace
}  // namespace embedps::worker
