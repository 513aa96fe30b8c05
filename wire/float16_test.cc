#include "wire/float16.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::wire {
namespace {

using float16_internal::PortableFloatToHalf;
using float16_internal::PortableHalfToFloat;

bool IsNanHalf(uint16_t h) {
  return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0;
}

TEST(Float16Test, KnownValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);               // largest half
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(IsNanHalf(FloatToHalf(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  // Ties go to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(Float16Test, EveryHalfRoundTripsAndBothPathsAgree) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t half = static_cast<uint16_t>(h);
    const float f = HalfToFloat(half);
    const float portable = PortableHalfToFloat(half);
    if (IsNanHalf(half)) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_TRUE(std::isnan(portable));
      continue;
    }
    ASSERT_EQ(std::memcmp(&f, &portable, sizeof(f)), 0) << h;
    ASSERT_EQ(FloatToHalf(f), half) << h;
    ASSERT_EQ(PortableFloatToHalf(f), half) << h;
  }
}

TEST(Float16Test, PortableMatchesHardwareOnRandomFloats) {
  std::mt19937 rng(5);
  for (int i = 0; i < 4000000; ++i) {
    uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    if (std::isnan(f)) continue;
    ASSERT_EQ(PortableFloatToHalf(f), FloatToHalf(f)) << std::hex << bits;
  }
}

TEST(Float16Test, BatchFormsMatchScalarIncludingTails) {
  std::vector<float> in(37);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 0.1f * i - 1.3f;
  std::vector<uint16_t> halves(in.size());
  FloatsToHalves(in, halves.data());
  std::vector<float> back(in.size());
  HalvesToFloats(halves, back.data());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(halves[i], FloatToHalf(in[i]));
    EXPECT_EQ(back[i], HalfToFloat(halves[i]));
    EXPECT_NEAR(back[i], in[i], 1e-3);
  }
}

}  // namespace
}  // namespace embedps::wire
