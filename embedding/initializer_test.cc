#include "embedding/initializer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

std::vector<float> Row(const InitializerSpec& init, uint64_t seed, uint64_t key,
                       int dim) {
  std::vector<float> row(dim);
  InitialRow(init, seed, key, absl::MakeSpan(row));
  return row;
}

struct Moments {
  double mean = 0, stddev = 0, min = 1e30, max = -1e30;
};

Moments Measure(const InitializerSpec& init, int keys, int dim) {
  Moments m;
  double sum = 0, sum_sq = 0;
  for (int k = 0; k < keys; ++k) {
    for (float v : Row(init, 7, k, dim)) {
      sum += v;
      sum_sq += double{v} * v;
      m.min = std::min<double>(m.min, v);
      m.max = std::max<double>(m.max, v);
    }
  }
  const double n = double{1} * keys * dim;
  m.mean = sum / n;
  m.stddev = std::sqrt(sum_sq / n - m.mean * m.mean);
  return m;
}

TEST(InitializerTest, SameSeedAndKeyGiveTheSameRowBitForBit) {
  for (auto kind :
       {InitializerSpec::Kind::kUniform, InitializerSpec::Kind::kNormal}) {
    InitializerSpec init;
    init.kind = kind;
    init.truncated = true;
    EXPECT_EQ(Row(init, 1, 42, 64), Row(init, 1, 42, 64));
    EXPECT_NE(Row(init, 1, 42, 64), Row(init, 2, 42, 64));
    EXPECT_NE(Row(init, 1, 42, 64), Row(init, 1, 43, 64));
    // Element i does not depend on the row length: a prefix is a prefix.
    const std::vector<float> longer = Row(init, 1, 42, 64);
    const std::vector<float> shorter = Row(init, 1, 42, 8);
    EXPECT_TRUE(std::equal(shorter.begin(), shorter.end(), longer.begin()));
  }
}

TEST(InitializerTest, ZerosAndConstant) {
  InitializerSpec init;
  init.kind = InitializerSpec::Kind::kZeros;
  for (float v : Row(init, 0, 5, 33)) EXPECT_EQ(v, 0.0f);
  init.kind = InitializerSpec::Kind::kConstant;
  init.value = -0.25f;
  for (float v : Row(init, 0, 5, 33)) EXPECT_EQ(v, -0.25f);
}

TEST(InitializerTest, UniformCoversTheHalfOpenInterval) {
  InitializerSpec init;
  init.kind = InitializerSpec::Kind::kUniform;
  init.low = -0.5f;
  init.high = 1.5f;
  const Moments m = Measure(init, 2000, 64);
  EXPECT_GE(m.min, -0.5);
  EXPECT_LT(m.max, 1.5);
  EXPECT_NEAR(m.mean, 0.5, 0.01);
  EXPECT_NEAR(m.stddev, 2.0 / std::sqrt(12.0), 0.01);
  EXPECT_LT(m.min, -0.499);
  EXPECT_GT(m.max, 1.499);
}

TEST(InitializerTest, NormalHasItsMomentsAndTruncationBounds) {
  InitializerSpec init;
  init.kind = InitializerSpec::Kind::kNormal;
  init.mean = 1.0f;
  init.stddev = 0.1f;
  const Moments full = Measure(init, 2000, 64);
  EXPECT_NEAR(full.mean, 1.0, 0.002);
  EXPECT_NEAR(full.stddev, 0.1, 0.002);
  EXPECT_LT(full.min, 1.0 - 0.35);  // tails beyond 3.5σ exist in 128k draws
  init.truncated = true;
  const Moments truncated = Measure(init, 2000, 64);
  EXPECT_GE(truncated.min, 1.0 - 0.2 - 1e-6);
  EXPECT_LE(truncated.max, 1.0 + 0.2 + 1e-6);
  // A normal truncated at ±2σ has standard deviation 0.8796σ.
  EXPECT_NEAR(truncated.stddev, 0.08796, 0.002);
}

TEST(InitializerTest, UniformUnitIsInUnitInterval) {
  double sum = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const float u = UniformUnit(3, 9, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
}

}  // namespace
}  // namespace embedps::embedding
