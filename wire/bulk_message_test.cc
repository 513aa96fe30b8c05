#include "wire/bulk_message.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/byte_buffers.h"
#include "wire/bulk_message_test.pb.h"

namespace embedps::wire {
namespace {

using bulk_test::BulkTestMessage;
using ::embedps::testing::ByteBufferContents;
using ::embedps::testing::StatusIs;

constexpr int kFirst = BulkTestMessage::kFirstFieldNumber;
constexpr int kSecond = BulkTestMessage::kSecondFieldNumber;

grpc::Slice BytesOf(const std::string& s) {
  OwnedBytes bytes(s.size());
  if (!s.empty()) std::memcpy(bytes.data(), s.data(), s.size());
  return std::move(bytes).ReleaseToSlice();
}

std::string Contents(const BulkBytes& bytes) {
  std::string out(bytes.size(), '\0');
  bytes.CopyTo(out.data());
  return out;
}

// `bytes` cut into slices of 1 to `max_slice` bytes, as a network might.
grpc::ByteBuffer Fragmented(const std::string& bytes, size_t max_slice,
                            uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<grpc::Slice> slices;
  for (size_t begin = 0; begin < bytes.size();) {
    const size_t n = std::min(bytes.size() - begin, 1 + rng() % max_slice);
    slices.emplace_back(bytes.data() + begin, n);
    begin += n;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

TEST(OwnedBytesTest, IsAlignedAndMovable) {
  OwnedBytes bytes(100);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(bytes.data()) % 64, 0u);
  std::memset(bytes.data(), 7, 100);
  OwnedBytes moved(std::move(bytes));
  EXPECT_EQ(bytes.size(), 0u);
  EXPECT_EQ(moved.size(), 100u);
  grpc::Slice slice = std::move(moved).ReleaseToSlice();
  EXPECT_EQ(moved.data(), nullptr);
  ASSERT_EQ(slice.size(), 100u);
  EXPECT_EQ(slice.begin()[99], 7);
  EXPECT_EQ(OwnedBytes().size(), 0u);
  EXPECT_EQ(OwnedBytes().ReleaseToSlice().size(), 0u);
}

TEST(BulkMessageTest, ProtobufReadsWhatWeWrite) {
  BulkTestMessage header;
  header.set_id(42);
  header.set_name("table");
  header.add_numbers(1);
  header.add_numbers(uint64_t{1} << 60);
  const std::string first = RandomBytes(100000, 1), second = "xyz";
  std::vector<BulkField> fields;
  fields.push_back({kFirst, BytesOf(first)});
  fields.push_back({kSecond, BytesOf(second)});
  const grpc::ByteBuffer buffer =
      SerializeBulkMessage(header, std::move(fields));

  BulkTestMessage parsed;
  ASSERT_TRUE(parsed.ParseFromString(ByteBufferContents(buffer)));
  EXPECT_EQ(parsed.id(), 42u);
  EXPECT_EQ(parsed.name(), "table");
  EXPECT_THAT(parsed.numbers(), ::testing::ElementsAre(1, uint64_t{1} << 60));
  EXPECT_EQ(parsed.first(), first);
  EXPECT_EQ(parsed.second(), second);
}

TEST(BulkMessageTest, ReadsProtobufsEncodingInFragments) {
  BulkTestMessage message;
  message.set_id(7);
  message.set_first(RandomBytes(5000, 2));
  message.set_name("after the first bulk field");
  message.set_second(RandomBytes(777, 3));
  message.add_numbers(9);
  const std::string encoded = message.SerializeAsString();
  for (size_t max_slice : {1, 3, 64, 4096, 1 << 20}) {
    SCOPED_TRACE(max_slice);
    const grpc::ByteBuffer buffer = Fragmented(encoded, max_slice, max_slice);
    BulkTestMessage header;
    ASSERT_OK_AND_ASSIGN(std::vector<BulkBytes> bulk,
                         ParseBulkMessage(buffer, {kFirst, kSecond}, &header));
    ASSERT_EQ(bulk.size(), 2u);
    EXPECT_EQ(header.id(), 7u);
    EXPECT_EQ(header.name(), "after the first bulk field");
    EXPECT_THAT(header.numbers(), ::testing::ElementsAre(9));
    EXPECT_TRUE(header.first().empty());
    EXPECT_EQ(Contents(bulk[0]), message.first());
    EXPECT_EQ(Contents(bulk[1]), message.second());
    if (max_slice < 4096) {
      EXPECT_GT(bulk[0].chunks().size(), 1u);
    }
    // Ranges that start and end inside chunks.
    std::mt19937_64 rng(max_slice);
    for (int i = 0; i < 100; ++i) {
      const size_t offset = rng() % message.first().size();
      const size_t count = rng() % (message.first().size() - offset + 1);
      std::string range(count, '\0');
      bulk[0].CopyTo(offset, count, range.data());
      EXPECT_EQ(range, message.first().substr(offset, count));
    }
  }
}

TEST(BulkMessageTest, RoundTripsAndKeepsTheLastOfARepeatedBulkField) {
  BulkTestMessage header;
  header.set_id(1);
  std::vector<BulkField> fields;
  fields.push_back({kFirst, BytesOf("old")});
  fields.push_back({kFirst, BytesOf("new value")});
  const grpc::ByteBuffer buffer =
      SerializeBulkMessage(header, std::move(fields));
  BulkTestMessage parsed;
  ASSERT_OK_AND_ASSIGN(std::vector<BulkBytes> bulk,
                       ParseBulkMessage(buffer, {kSecond, kFirst}, &parsed));
  EXPECT_EQ(parsed.id(), 1u);
  EXPECT_TRUE(bulk[0].empty());  // second: absent
  EXPECT_EQ(Contents(bulk[1]), "new value");
}

TEST(BulkMessageTest, EmptyMessage) {
  const grpc::ByteBuffer buffer = SerializeBulkMessage(BulkTestMessage(), {});
  EXPECT_EQ(buffer.Length(), 0u);
  BulkTestMessage parsed;
  ASSERT_OK_AND_ASSIGN(std::vector<BulkBytes> bulk,
                       ParseBulkMessage(buffer, {kFirst}, &parsed));
  EXPECT_TRUE(bulk[0].empty());
  EXPECT_EQ(parsed.id(), 0u);
}

TEST(BulkMessageTest, RefusesMalformedBytes) {
  BulkTestMessage message;
  message.set_id(3);
  message.set_first(RandomBytes(300, 4));
  const std::string good = message.SerializeAsString();
  const std::vector<std::string> bad = {
      good.substr(0, good.size() - 1),  // bulk field truncated
      good.substr(0, 3),                // inside the bulk field's length
      std::string("\x08", 1),           // a varint field without its value
      std::string("\x00\x01", 2),       // tag 0
      std::string("\x1a\x05"
                  "ab",
                  4),              // name: 5 bytes announced, 2 sent
      std::string("\x0f\x00", 2),  // wire type 7
      std::string("\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),
  };
  for (const std::string& bytes : bad) {
    SCOPED_TRACE(bytes.size());
    for (size_t max_slice : {1, 1 << 20}) {
      BulkTestMessage header;
      EXPECT_THAT(
          ParseBulkMessage(Fragmented(bytes, max_slice, 5), {kFirst}, &header)
              .status(),
          StatusIs(
              absl::StatusCode::kInvalidArgument,
              ::testing::HasSubstr("embedps.wire.bulk_test.BulkTestMessage")));
    }
  }
}

TEST(BulkMessageTest, ABulkFieldNumberWithAnotherWireTypeIsNotBulk) {
  // Field 2 sent as a varint: protobuf would keep it as an unknown field;
  // so does the header, and the bulk field stays empty.
  const std::string bytes("\x10\x05\x08\x02", 4);
  BulkTestMessage header;
  ASSERT_OK_AND_ASSIGN(
      std::vector<BulkBytes> bulk,
      ParseBulkMessage(Fragmented(bytes, 2, 6), {kFirst}, &header));
  EXPECT_TRUE(bulk[0].empty());
  EXPECT_EQ(header.id(), 2u);
}

}  // namespace
}  // namespace embedps::wire
