#include "wire/bulk_codec.h"

#include <cstdint>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::wire {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::vector<uint64_t> kKeys = {10, uint64_t{1} << 63, 7, 0, 42};

TEST(BulkCodecTest, PullRequestRoundTrip) {
  proto::PullRequest header;
  header.set_table_id(3);
  header.set_value_type(proto::FLOAT16);
  header.set_step(99);
  header.set_read_only(true);
  const std::vector<uint32_t> rows = {4, 1, 2};
  const grpc::ByteBuffer buffer = EncodePullRequest(header, kKeys, rows);
  ASSERT_OK_AND_ASSIGN(PullRequestView view, ParsePullRequest(buffer));
  EXPECT_EQ(view.header.table_id(), 3u);
  EXPECT_EQ(view.header.value_type(), proto::FLOAT16);
  EXPECT_EQ(view.header.step(), 99u);
  EXPECT_TRUE(view.header.read_only());
  EXPECT_TRUE(view.header.keys().empty()) << "keys travel as a bulk field";
  ASSERT_OK_AND_ASSIGN(const size_t count, KeyCount(view.keys));
  EXPECT_EQ(count, 3u);
  EXPECT_THAT(CopyKeys(view.keys), ElementsAre(42, uint64_t{1} << 63, 7));
}

TEST(BulkCodecTest, PushRequestRoundTripFloat32IsExact) {
  constexpr size_t kDim = 3;
  std::vector<float> grads(kKeys.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.1f * i - 0.7f;
  proto::PushRequest header;
  header.set_table_id(1);
  header.set_client_id(5);
  header.set_sequence(6);
  header.set_parts_in_step(2);
  const std::vector<uint32_t> rows = {2, 0};
  const grpc::ByteBuffer buffer =
      EncodePushRequest(header, kKeys, rows, grads.data(), kDim);
  ASSERT_OK_AND_ASSIGN(PushRequestView view, ParsePushRequest(buffer));
  EXPECT_EQ(view.header.client_id(), 5u);
  EXPECT_EQ(view.header.sequence(), 6u);
  EXPECT_EQ(view.header.parts_in_step(), 2u);
  EXPECT_THAT(CopyKeys(view.keys), ElementsAre(7, 10));
  ASSERT_OK_AND_ASSIGN(
      Gradients decoded,
      DecodeGradients(view.gradients, proto::FLOAT32, rows.size() * kDim));
  EXPECT_THAT(
      std::vector<float>(decoded.floats().begin(), decoded.floats().end()),
      ElementsAre(grads[6], grads[7], grads[8], grads[0], grads[1], grads[2]));
}

TEST(BulkCodecTest, PushRequestRoundTripFloat16Rounds) {
  constexpr size_t kDim = 2;
  const std::vector<float> grads = {1.0f, -2.5f, 0.1f, 65504.0f, 3.0f,
                                    4.0f, 5.0f,  6.0f, 7.0f,     8.0f};
  proto::PushRequest header;
  header.set_value_type(proto::FLOAT16);
  const std::vector<uint32_t> rows = {0, 1};
  // Views into the buffer: it must outlive them.
  const grpc::ByteBuffer buffer =
      EncodePushRequest(header, kKeys, rows, grads.data(), kDim);
  ASSERT_OK_AND_ASSIGN(PushRequestView view, ParsePushRequest(buffer));
  EXPECT_EQ(view.gradients.size(), 4 * sizeof(uint16_t));
  ASSERT_OK_AND_ASSIGN(Gradients decoded,
                       DecodeGradients(view.gradients, proto::FLOAT16, 4));
  EXPECT_EQ(decoded.floats()[0], 1.0f);
  EXPECT_EQ(decoded.floats()[1], -2.5f);
  EXPECT_NEAR(decoded.floats()[2], 0.1f, 1e-4f);
  EXPECT_EQ(decoded.floats()[3], 65504.0f);
}

TEST(BulkCodecTest, PullResponseRoundTripBothTypes) {
  for (proto::ValueType type : {proto::FLOAT32, proto::FLOAT16}) {
    constexpr size_t kRows = 3, kDim = 4;
    PullResponseBuilder builder(type, kRows * kDim);
    for (size_t i = 0; i < kRows * kDim; ++i) builder.values()[i] = i * 0.5f;
    const grpc::ByteBuffer buffer = std::move(builder).Finish();
    // Rows land where out_row says: here in reverse order.
    std::vector<float> out(kRows * kDim, -1.0f);
    ASSERT_OK(DecodePullResponse(buffer, type, kRows, kDim, [&](size_t k) {
      return out.data() + (kRows - 1 - k) * kDim;
    }));
    for (size_t k = 0; k < kRows; ++k) {
      for (size_t d = 0; d < kDim; ++d) {
        EXPECT_EQ(out[(kRows - 1 - k) * kDim + d], (k * kDim + d) * 0.5f)
            << ValueTypeName(type);
      }
    }
  }
}

TEST(BulkCodecTest, WrongSizesAreRefused) {
  PullResponseBuilder builder(proto::FLOAT32, 6);
  for (float& v : builder.values()) v = 1;
  const grpc::ByteBuffer buffer = std::move(builder).Finish();
  EXPECT_THAT(DecodePullResponse(buffer, proto::FLOAT32, 2, 4,
                                 [](size_t) -> float* { return nullptr; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("24 bytes for 2 rows of dim 4")));

  proto::PushRequest header;
  const std::vector<float> grads(4, 1.0f);
  const std::vector<uint32_t> rows = {0, 1};
  const grpc::ByteBuffer push =
      EncodePushRequest(header, kKeys, rows, grads.data(), 2);
  ASSERT_OK_AND_ASSIGN(PushRequestView view, ParsePushRequest(push));
  EXPECT_THAT(
      DecodeGradients(view.gradients, proto::FLOAT32, 5).status(),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("need 20 bytes of float32 gradients, got 16")));
}

TEST(BulkCodecTest, KeysThatAreNotWholeUint64sAreRefused) {
  proto::PullRequest header;
  header.set_keys(std::string(12, 'k'));
  std::string bytes;
  ASSERT_TRUE(header.SerializeToString(&bytes));
  grpc::Slice slice(bytes);
  const grpc::ByteBuffer buffer(&slice, 1);
  ASSERT_OK_AND_ASSIGN(PullRequestView view, ParsePullRequest(buffer));
  EXPECT_THAT(KeyCount(view.keys).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("got 12 bytes, not a multiple of 8")));
}

TEST(BulkCodecTest, GarbageIsNotARequest) {
  const std::string garbage = "\xff\xff\xff\xff\xff";
  grpc::Slice slice(garbage);
  const grpc::ByteBuffer buffer(&slice, 1);
  EXPECT_THAT(ParsePullRequest(buffer).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParsePushRequest(buffer).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BulkCodecTest, UnknownValueTypeIsNamed) {
  EXPECT_OK(CheckValueType(proto::FLOAT16));
  EXPECT_THAT(CheckValueType(7), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("unknown value_type 7")));
}

}  // namespace
}  // namespace embedps::wire
