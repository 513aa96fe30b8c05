// The calls of a job's hot-row tier (HotKeys, ReadRows, WriteRows) on real
// shards in this process (server::Shard on 127.0.0.1:0) through the
// client, and every kind of bad request sent straight to a shard: refused
// with its code and message, the table unchanged.
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "embedding/table_spec.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "testing/in_process_cluster.h"

namespace embedps {
namespace {

using ::testing::HasSubstr;

constexpr int kDim = 4;
// Adagrad: one accumulator float per element.
constexpr size_t kRecordBytes = 8 + sizeof(float) * 2 * kDim;

proto::TableConfig AdagradTable(const std::string& name) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.1f);
  return config;
}

class HotRowsServiceTest : public testing::ClusterTest {};

TEST_F(HotRowsServiceTest, MostPulledKeysRoundTripWithTheirState) {
  StartShards(2);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(AdagradTable("hot")));
  // Key k is pulled k times (keys 1..12, over both shards).
  std::vector<float> row(kDim);
  for (uint64_t k = 1; k <= 12; ++k) {
    for (uint64_t n = 0; n < k; ++n) {
      ASSERT_OK(client->Pull(table, {k}, absl::MakeSpan(row)));
    }
  }
  ASSERT_OK_AND_ASSIGN(std::vector<client::Client::HotKey> hot,
                       client->HotKeys(table, 4));
  ASSERT_EQ(hot.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(hot[i].key, static_cast<uint64_t>(12 - i));
    EXPECT_EQ(hot[i].access_count, 12u - i);
  }
  std::vector<uint64_t> keys = {12, 11, 10, 9, 500};
  std::vector<float> grads(keys.size() * kDim, 0.5f);
  ASSERT_OK(client->Push(table,
                         std::vector<uint64_t>(keys.begin(), keys.end() - 1),
                         absl::MakeConstSpan(grads).first(4 * kDim)));

  std::vector<char> records(keys.size() * kRecordBytes);
  bool found[5];
  ASSERT_OK(client->ReadRows(table, keys, 0, absl::MakeSpan(records),
                             absl::MakeSpan(found)));
  EXPECT_THAT(found, ::testing::ElementsAre(true, true, true, true, false));
  std::vector<float> pulled(keys.size() * kDim);
  ASSERT_OK(client->Lookup(table, keys, absl::MakeSpan(pulled)));
  for (size_t i = 0; i < 4; ++i) {
    float floats[2 * kDim];
    std::memcpy(floats, records.data() + i * kRecordBytes + 8, sizeof(floats));
    for (int d = 0; d < kDim; ++d) {
      EXPECT_EQ(floats[d], pulled[i * kDim + d]);
      EXPECT_EQ(floats[kDim + d], 0.25f) << "the accumulator: 0.5²";
    }
  }

  // Written back changed: key 10 erased meanwhile stays erased.
  ASSERT_OK(client->Erase(table, {10}).status());
  for (size_t i = 0; i < keys.size(); ++i) {
    float floats[2 * kDim];
    for (int d = 0; d < 2 * kDim; ++d) floats[d] = 1.0f + i + d;
    std::memcpy(records.data() + i * kRecordBytes + 8, floats, sizeof(floats));
  }
  bool written[5];
  ASSERT_OK(
      client->WriteRows(table, keys, records, 7, absl::MakeSpan(written)));
  EXPECT_THAT(written, ::testing::ElementsAre(true, true, false, true, false));
  ASSERT_OK(client->Lookup(table, keys, absl::MakeSpan(pulled)));
  EXPECT_EQ(pulled[0], 1.0f);
  EXPECT_EQ(pulled[kDim + 1], 3.0f);
  std::vector<char> again(records.size());
  ASSERT_OK(client->ReadRows(table, keys, 0, absl::MakeSpan(again),
                             absl::MakeSpan(found)));
  EXPECT_THAT(found, ::testing::ElementsAre(true, true, false, true, false));
  EXPECT_EQ(std::memcmp(again.data() + 8, records.data() + 8, kRecordBytes - 8),
            0)
      << "the optimizer state came back too";
}

TEST_F(HotRowsServiceTest, BadRequestsAreRefusedAndChangeNothing) {
  server::ShardOptions strict;
  strict.service.max_keys_per_request = 100;
  StartShards(2, strict);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(AdagradTable("strict")));
  std::vector<uint64_t> mine;
  uint64_t foreign = 0;
  for (uint64_t k = 1; mine.size() < 3 || foreign == 0; ++k) {
    if (ShardOfKey(k, 2) == 0) {
      if (mine.size() < 3) mine.push_back(k);
    } else if (foreign == 0) {
      foreign = k;
    }
  }
  std::vector<float> before(mine.size() * kDim);
  ASSERT_OK(client->Pull(table, mine, absl::MakeSpan(before)));
  auto stub = proto::TrainingService::NewStub(
      grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  const uint32_t id = table.shard_table_ids[0];
  const auto pack = [](const std::vector<uint64_t>& keys) {
    return std::string(reinterpret_cast<const char*>(keys.data()),
                       keys.size() * 8);
  };
  std::string records(mine.size() * kRecordBytes, '\0');
  for (size_t i = 8; i < records.size(); i += kRecordBytes) {
    const float two = 2.0f;
    std::memcpy(records.data() + i, &two, sizeof(two));
  }
  proto::WriteRowsRequest base;
  base.set_table_id(id);
  base.set_keys(pack(mine));
  base.set_records(records);
  struct Case {
    std::string name;
    proto::WriteRowsRequest write;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  {
    Case c{"unknown table", base, grpc::StatusCode::NOT_FOUND, "42"};
    c.write.set_table_id(42);
    cases.push_back(c);
  }
  {
    Case c{"keys not whole uint64s", base, grpc::StatusCode::INVALID_ARGUMENT,
           "8 bytes each"};
    c.write.set_keys(pack(mine).substr(0, 13));
    cases.push_back(c);
  }
  {
    Case c{"no keys", base, grpc::StatusCode::INVALID_ARGUMENT,
           "empty request"};
    c.write.clear_keys();
    cases.push_back(c);
  }
  {
    Case c{"a key of the other shard", base,
           grpc::StatusCode::FAILED_PRECONDITION, "belongs to shard 1"};
    std::vector<uint64_t> keys = mine;
    keys[1] = foreign;
    c.write.set_keys(pack(keys));
    cases.push_back(c);
  }
  {
    Case c{"records of another size", base, grpc::StatusCode::INVALID_ARGUMENT,
           "bytes of records"};
    c.write.set_records(records.substr(0, records.size() - 4));
    cases.push_back(c);
  }
  {
    Case c{"a repeated key", base, grpc::StatusCode::INVALID_ARGUMENT,
           "repeats"};
    std::vector<uint64_t> keys = mine;
    keys[2] = keys[0];
    c.write.set_keys(pack(keys));
    cases.push_back(c);
  }
  {
    Case c{"a NaN in the last record", base, grpc::StatusCode::INVALID_ARGUMENT,
           "NaN or infinite"};
    std::string bad = records;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(bad.data() + bad.size() - 4, &nan, sizeof(nan));
    c.write.set_records(bad);
    cases.push_back(c);
  }
  {
    Case c{"over the keys a request may carry", base,
           grpc::StatusCode::RESOURCE_EXHAUSTED, "at most 100"};
    std::vector<uint64_t> keys(101, mine[0]);
    c.write.set_keys(pack(keys));
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    grpc::ClientContext context;
    proto::WriteRowsResponse response;
    const grpc::Status status = stub->WriteRows(&context, c.write, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.name;
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  std::vector<float> after(before.size());
  ASSERT_OK(client->Lookup(table, mine, absl::MakeSpan(after)));
  EXPECT_EQ(after, before) << "nothing was written";

  // ReadRows and HotKeys refuse the same way.
  {
    grpc::ClientContext context;
    proto::ReadRowsRequest read;
    read.set_table_id(id);
    read.set_keys(pack({foreign}));
    proto::ReadRowsResponse response;
    const grpc::Status status = stub->ReadRows(&context, read, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  // HotKeys: no key is no request; more than a request may carry is the
  // most it may (this shard holds 3 rows).
  for (uint32_t count : {0u, 1000u}) {
    grpc::ClientContext context;
    proto::HotKeysRequest request;
    request.set_table_id(id);
    request.set_count(count);
    proto::HotKeysResponse response;
    const grpc::Status status = stub->HotKeys(&context, request, &response);
    if (count == 0) {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    } else {
      EXPECT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.keys().size(), 3 * sizeof(uint64_t));
    }
  }
  // The client checks its own sizes before it sends.
  std::vector<char> short_records(kRecordBytes);
  bool flags[3];
  EXPECT_THAT(client->ReadRows(table, mine, 0, absl::MakeSpan(short_records),
                               absl::MakeSpan(flags)),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace embedps
