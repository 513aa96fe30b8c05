#include "client/row_cache.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::client {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

std::vector<float> Row(float v, size_t dim = 4) {
  return std::vector<float>(dim, v);
}

TEST(RowCacheTest, GetsWhatWasPutForTheTableAndKey) {
  RowCache cache(1000, absl::Seconds(1));
  cache.Put(1, 7, Row(3).data(), 4, kT0, /*version=*/1);
  std::vector<float> out(4);
  ASSERT_TRUE(cache.Get(1, 7, out.data(), 4, kT0));
  EXPECT_EQ(out, Row(3));
  EXPECT_FALSE(cache.Get(2, 7, out.data(), 4, kT0));  // another table
  EXPECT_FALSE(cache.Get(1, 8, out.data(), 4, kT0));
  EXPECT_FALSE(cache.Get(1, 7, out.data(), 8, kT0));  // another dim
}

TEST(RowCacheTest, ARowExpiresAfterTheTtlAndAPutRenewsIt) {
  RowCache cache(1000, absl::Seconds(1));
  cache.Put(1, 7, Row(3).data(), 4, kT0, /*version=*/1);
  std::vector<float> out(4);
  EXPECT_TRUE(cache.Get(1, 7, out.data(), 4, kT0 + absl::Milliseconds(999)));
  EXPECT_FALSE(cache.Get(1, 7, out.data(), 4, kT0 + absl::Seconds(1)));
  EXPECT_EQ(cache.size(), 0u);
  cache.Put(1, 7, Row(5).data(), 4, kT0 + absl::Seconds(2), /*version=*/1);
  ASSERT_TRUE(cache.Get(1, 7, out.data(), 4, kT0 + absl::Seconds(2)));
  EXPECT_EQ(out, Row(5));
}

TEST(RowCacheTest, TheLeastRecentlyUsedRowGoesFirst) {
  // 64 rows: one a shard. Keys in one shard are found by trying.
  RowCache cache(64 * 3, absl::Hours(1));
  std::vector<float> out(4);
  // Fill far past capacity while using key 0 each time: it stays.
  for (uint64_t k = 1; k <= 5000; ++k) {
    if (k == 1) cache.Put(9, 0, Row(42).data(), 4, kT0, /*version=*/1);
    ASSERT_TRUE(cache.Get(9, 0, out.data(), 4, kT0)) << k;
    cache.Put(9, k, Row(k).data(), 4, kT0, /*version=*/1);
  }
  EXPECT_EQ(out, Row(42));
  EXPECT_LE(cache.size(), 64u * 3);
  // The earliest keys, never used again, are gone; the latest are held.
  int old_held = 0;
  for (uint64_t k = 1; k <= 100; ++k) {
    old_held += cache.Get(9, k, out.data(), 4, kT0);
  }
  EXPECT_EQ(old_held, 0);
  EXPECT_TRUE(cache.Get(9, 5000, out.data(), 4, kT0));
  EXPECT_EQ(out, Row(5000));
}

TEST(RowCacheTest, APutOfAHeldKeyReplacesItsRow) {
  RowCache cache(100, absl::Hours(1));
  cache.Put(1, 7, Row(3).data(), 4, kT0, /*version=*/1);
  cache.Put(1, 7, Row(4, 8).data(), 8, kT0, /*version=*/2);
  std::vector<float> out(8);
  EXPECT_FALSE(cache.Get(1, 7, out.data(), 4, kT0));
  cache.Put(1, 7, Row(4, 8).data(), 8, kT0, /*version=*/3);
  uint64_t version = 0;
  ASSERT_TRUE(cache.Get(1, 7, out.data(), 8, kT0, &version));
  EXPECT_EQ(out, Row(4, 8));
  EXPECT_EQ(version, 3u);  // the version it was read from
  EXPECT_EQ(cache.size(), 1u);
}

TEST(RowCacheTest, ManyThreadsPutAndGet) {
  RowCache cache(64 * 8, absl::Hours(1));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&cache, t] {
      std::vector<float> out(4);
      for (uint64_t i = 0; i < 20000; ++i) {
        const uint64_t key = (i * 7 + t) % 1000;
        if (cache.Get(1, key, out.data(), 4, kT0)) {
          ASSERT_EQ(out, Row(key));
        } else {
          cache.Put(1, key, Row(key).data(), 4, kT0, /*version=*/1);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(cache.size(), 64u * 8);
}

}  // namespace
}  // namespace embedps::client
