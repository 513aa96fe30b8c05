#include "server/serving_storage.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<float> RoundTrip(const RowCodec& codec,
                             const std::vector<float>& row) {
  std::vector<float> stored(codec.stored_floats(), -1.0f);
  codec.Encode(row.data(), stored.data());
  std::vector<float> back(codec.dim());
  codec.Decode(stored.data(), back.data());
  return back;
}

std::vector<float> RandomRow(int dim, std::mt19937& random) {
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> row(dim);
  for (float& v : row) v = normal(random);
  return row;
}

TEST(RowCodecTest, StoredFloatsOfEachStorage) {
  EXPECT_EQ(RowCodec(proto::ServingConfig::FLOAT32, 64).stored_floats(), 64);
  EXPECT_EQ(RowCodec(proto::ServingConfig::FLOAT16, 64).stored_floats(), 32);
  EXPECT_EQ(RowCodec(proto::ServingConfig::FLOAT16, 7).stored_floats(), 4);
  EXPECT_EQ(RowCodec(proto::ServingConfig::INT8, 64).stored_floats(), 17);
  EXPECT_EQ(RowCodec(proto::ServingConfig::INT8, 5).stored_floats(), 3);
  EXPECT_EQ(RowCodec(proto::ServingConfig::INT8, 1).stored_floats(), 2);
}

TEST(RowCodecTest, Float32IsExact) {
  std::mt19937 random(1);
  const RowCodec codec(proto::ServingConfig::FLOAT32, 13);
  EXPECT_TRUE(codec.identity());
  const std::vector<float> row = RandomRow(13, random);
  EXPECT_EQ(RoundTrip(codec, row), row);
}

TEST(RowCodecTest, Float16IsTheNearestHalf) {
  std::mt19937 random(2);
  for (int dim : {1, 2, 7, 64, 129}) {
    const RowCodec codec(proto::ServingConfig::FLOAT16, dim);
    const std::vector<float> row = RandomRow(dim, random);
    const std::vector<float> back = RoundTrip(codec, row);
    for (int i = 0; i < dim; ++i) {
      // Half precision: 11 significant bits, so within 2^-11 relative.
      EXPECT_NEAR(back[i], row[i], std::fabs(row[i]) * 0x1p-11f + 1e-7f)
          << "dim " << dim << " value " << i;
    }
  }
  const RowCodec codec(proto::ServingConfig::FLOAT16, 3);
  const std::vector<float> exact = {0.5f, -2.0f, 1024.0f};
  EXPECT_EQ(RoundTrip(codec, exact), exact);
  // Beyond the half range: infinity, as the wire's FLOAT16 gives.
  const std::vector<float> big = RoundTrip(codec, {1e6f, -1e6f, 0.0f});
  EXPECT_TRUE(std::isinf(big[0]) && big[0] > 0);
  EXPECT_TRUE(std::isinf(big[1]) && big[1] < 0);
}

TEST(RowCodecTest, Int8IsWithinHalfAStepOfMaxOver127) {
  std::mt19937 random(3);
  for (int dim : {1, 3, 4, 5, 64, 127}) {
    const RowCodec codec(proto::ServingConfig::INT8, dim);
    const std::vector<float> row = RandomRow(dim, random);
    float max = 0.0f;
    for (float v : row) max = std::max(max, std::fabs(v));
    const std::vector<float> back = RoundTrip(codec, row);
    for (int i = 0; i < dim; ++i) {
      EXPECT_NEAR(back[i], row[i], max / 127.0f * 0.5f * 1.0001f)
          << "dim " << dim << " value " << i;
    }
  }
  const RowCodec codec(proto::ServingConfig::INT8, 4);
  // The largest magnitude is exact, zeros stay zeros, an all-zero row
  // reads as zeros.
  const std::vector<float> back = RoundTrip(codec, {-3.0f, 0.0f, 1.5f, 0.0f});
  EXPECT_FLOAT_EQ(back[0], -3.0f);
  EXPECT_EQ(back[1], 0.0f);
  EXPECT_NEAR(back[2], 1.5f, 3.0f / 254.0f);
  EXPECT_EQ(RoundTrip(codec, {0, 0, 0, 0}), std::vector<float>(4, 0.0f));
  // A non-finite value makes the row read as NaN, never a finite lie.
  const std::vector<float> nan =
      RoundTrip(codec, {1.0f, std::numeric_limits<float>::infinity(), 0, 0});
  for (float v : nan) EXPECT_TRUE(std::isnan(v));
}

TEST(RowCodecTest, StorageNamesParse) {
  EXPECT_EQ(ParseServingStorage("float16").value(),
            proto::ServingConfig::FLOAT16);
  EXPECT_EQ(ParseServingStorage("INT8").value(), proto::ServingConfig::INT8);
  EXPECT_EQ(ParseServingStorage("float32").value(),
            proto::ServingConfig::FLOAT32);
  EXPECT_THAT(ParseServingStorage("bfloat16"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("none of float32, float16, int8")));
  EXPECT_THAT(ParseServingStorage(std::string(100000, 'x')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::Not(HasSubstr(std::string(100, 'x')))));
}

}  // namespace
}  // namespace embedps::server
