#include "embedding/internal/count_min_sketch.h"

#include <cstdint>

#include "common/key_hash.h"
#include "gtest/gtest.h"

namespace embedps::embedding_internal {
namespace {

TEST(CountMinSketchTest, CountsExactlyWithoutCollisions) {
  CountMinSketch sketch(/*width=*/1024, /*aging_period=*/1'000'000);
  for (int i = 0; i < 7; ++i) sketch.Add(Mix64(1));
  sketch.Add(Mix64(2));
  EXPECT_EQ(sketch.Estimate(Mix64(1)), 7u);
  EXPECT_EQ(sketch.Estimate(Mix64(2)), 1u);
  EXPECT_EQ(sketch.Estimate(Mix64(3)), 0u);
}

TEST(CountMinSketchTest, NeverUnderCountsAndRanksHotAboveCold) {
  // 4096 keys in 256 counters per row: collisions everywhere.
  CountMinSketch sketch(/*width=*/256, /*aging_period=*/1'000'000);
  for (uint64_t round = 0; round < 10; ++round) {
    for (uint64_t key = 0; key < 4096; ++key) {
      // Keys below 16 are seen ten times as often as the others.
      const int times = key < 16 ? 10 : (round == 0 ? 1 : 0);
      for (int t = 0; t < times; ++t) sketch.Add(Mix64(key));
    }
  }
  for (uint64_t key = 0; key < 16; ++key) {
    EXPECT_GE(sketch.Estimate(Mix64(key)), 100u) << key;
  }
  uint64_t cold_total = 0;
  for (uint64_t key = 16; key < 4096; ++key) {
    EXPECT_GE(sketch.Estimate(Mix64(key)), 1u) << key;
    cold_total += sketch.Estimate(Mix64(key));
  }
  // Conservative update keeps the over-count of cold keys small.
  EXPECT_LT(cold_total / 4080.0, 10.0);
}

TEST(CountMinSketchTest, SaturatesAt255) {
  CountMinSketch sketch(64, 1'000'000);
  for (int i = 0; i < 300; ++i) sketch.Add(Mix64(9));
  EXPECT_EQ(sketch.Estimate(Mix64(9)), 255u);
}

TEST(CountMinSketchTest, AgingHalvesEveryCounter) {
  CountMinSketch sketch(1024, /*aging_period=*/20);
  for (int i = 0; i < 12; ++i) sketch.Add(Mix64(1));
  for (int i = 0; i < 7; ++i) sketch.Add(Mix64(2));
  EXPECT_EQ(sketch.additions(), 19u);
  sketch.Add(Mix64(3));  // the 20th addition ages the sketch
  EXPECT_EQ(sketch.additions(), 0u);
  EXPECT_EQ(sketch.Estimate(Mix64(1)), 6u);
  EXPECT_EQ(sketch.Estimate(Mix64(2)), 3u);
  EXPECT_EQ(sketch.Estimate(Mix64(3)), 0u);
}

TEST(CountMinSketchTest, MergeAddsCountersAndAdditions) {
  CountMinSketch a(1024, 100), b(1024, 100);
  for (int i = 0; i < 5; ++i) a.Add(Mix64(1));
  for (int i = 0; i < 3; ++i) b.Add(Mix64(1));
  b.Add(Mix64(2));
  a.Merge(b.counters(), b.additions());
  EXPECT_EQ(a.Estimate(Mix64(1)), 8u);
  EXPECT_EQ(a.Estimate(Mix64(2)), 1u);
  EXPECT_EQ(a.additions(), 9u);
  EXPECT_EQ(a.bytes(), 4u * 1024);
}

}  // namespace
}  // namespace embedps::embedding_internal
