// Real ps_server processes on 127.0.0.1, driven through the client and a
// raw stub: routing, dedup and ordering, float16, bad input, shutdown.
#include <signal.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "client/coordination_client.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "embedding/table.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/embedps.grpc.pb.h"
#include "server/table_config.h"
#include "tests/server_process.h"
#include "wire/bulk_message.h"

namespace embedps {
namespace {

using ::embedps::testing::ServerProcess;
using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kServer[] = "server/ps_server";
constexpr int kDim = 8;

proto::TableConfig SgdTable(const std::string& name) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.mutable_initializer()->set_kind(proto::InitializerConfig::ZEROS);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

class ClusterTest : public ::testing::Test {
 protected:
  void StartShards(int n, std::vector<std::string> extra = {}) {
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> args = {absl::StrCat("--shard_index=", i),
                                       absl::StrCat("--num_shards=", n)};
      args.insert(args.end(), extra.begin(), extra.end());
      ASSERT_OK_AND_ASSIGN(auto server, ServerProcess::Start(kServer, args));
      addresses_.push_back(server->address());
      servers_.push_back(std::move(server));
    }
  }

  std::unique_ptr<client::Client> Connect(
      proto::ValueType wire = proto::FLOAT32,
      absl::Duration retry_deadline = absl::Seconds(5),
      int channels_per_shard = 1) {
    client::ClientOptions options;
    options.servers = addresses_;
    options.wire_type = wire;
    options.retry.retry_deadline = retry_deadline;
    options.channels_per_shard = channels_per_shard;
    auto client = client::Client::Connect(options);
    EXPECT_OK(client);
    return std::move(client).value();
  }

  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::string> addresses_;
};

TEST_F(ClusterTest, EachKeyLandsOnExactlyOneShardAndUpdatesRoundTrip) {
  StartShards(3);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("ids")));

  constexpr int kKeys = 3000;
  std::vector<uint64_t> keys(kKeys);
  std::mt19937_64 rng(1);
  for (auto& k : keys) k = rng();
  std::vector<float> grads(kKeys * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * (i % 13) - 1.0f;
  ASSERT_OK(client->Push(table, keys, grads));

  std::vector<float> values(kKeys * kDim);
  ASSERT_OK(client->Pull(table, keys, absl::MakeSpan(values)));
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(values[i], -grads[i]) << i;

  std::vector<int> want_rows(3, 0);
  for (uint64_t k : keys) ++want_rows[ShardOfKey(k, 3)];
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  ASSERT_EQ(stats.size(), 3u);
  uint64_t total = 0;
  for (int s = 0; s < 3; ++s) {
    EXPECT_EQ(stats[s].shard_index(), s);
    ASSERT_EQ(stats[s].table_size(), 1);
    EXPECT_EQ(stats[s].table(0).rows(), static_cast<uint64_t>(want_rows[s]))
        << s;
    total += stats[s].table(0).rows();
  }
  EXPECT_EQ(total, static_cast<uint64_t>(kKeys));
}

// Lookup reads like a Pull but changes nothing: stored rows come back as
// they are, keys without a row get the initial values a Pull would give
// them, and no row is created.
TEST_F(ClusterTest, LookupReadsWithoutSideEffects) {
  StartShards(2);
  auto client = Connect();
  proto::TableConfig config = SgdTable("lookup");
  config.mutable_initializer()->set_kind(proto::InitializerConfig::UNIFORM);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table, client->CreateTable(config));
  const std::vector<uint64_t> stored = {11, 22, 33};
  std::vector<float> grads(stored.size() * kDim, 0.5f);
  ASSERT_OK(client->Push(table, stored, grads));
  std::vector<float> pulled(stored.size() * kDim);
  ASSERT_OK(client->Pull(table, stored, absl::MakeSpan(pulled)));

  // Stored keys, a duplicate, and two keys without rows.
  const std::vector<uint64_t> keys = {22, 44, 11, 22, 55, 33};
  std::vector<float> looked(keys.size() * kDim);
  ASSERT_OK(client->Lookup(table, keys, absl::MakeSpan(looked)));
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  uint64_t rows = 0, pulled_keys = 0;
  for (const auto& shard : stats) {
    rows += shard.table(0).rows();
    pulled_keys += shard.table(0).pulled_keys();
  }
  EXPECT_EQ(rows, stored.size()) << "Lookup created rows";
  EXPECT_EQ(pulled_keys, stored.size()) << "Lookup counted as Pull";
  const auto row = [&](const std::vector<float>& v, size_t i) {
    return std::vector<float>(v.begin() + i * kDim, v.begin() + (i + 1) * kDim);
  };
  EXPECT_EQ(row(looked, 0), row(pulled, 1));
  EXPECT_EQ(row(looked, 2), row(pulled, 0));
  EXPECT_EQ(row(looked, 3), row(pulled, 1));
  EXPECT_EQ(row(looked, 5), row(pulled, 2));
  // The missing keys' values are what a Pull then creates.
  std::vector<float> created(2 * kDim);
  ASSERT_OK(client->Pull(table, {{44, 55}}, absl::MakeSpan(created)));
  EXPECT_EQ(row(looked, 1), row(created, 0));
  EXPECT_EQ(row(looked, 4), row(created, 1));
}

TEST_F(ClusterTest, DuplicatesAndOrderArePreserved) {
  StartShards(2);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("dup")));
  const std::vector<uint64_t> keys = {5, 9, 5, 1, 9, 5};
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  ASSERT_OK(
      client->Push(table, keys, grads));  // key 5: -3, key 9: -2, key 1: -1
  const std::vector<uint64_t> order = {1, 5, 9, 1, 77};
  std::vector<float> values(order.size() * kDim);
  ASSERT_OK(client->Pull(table, order, absl::MakeSpan(values)));
  const std::vector<float> want = {-1, -3, -2, -1, 0};
  for (size_t k = 0; k < order.size(); ++k) {
    for (int d = 0; d < kDim; ++d)
      EXPECT_EQ(values[k * kDim + d], want[k]) << k;
  }
  // The handle is idempotent: creating again gives the same table.
  ASSERT_OK_AND_ASSIGN(client::TableHandle again,
                       client->CreateTable(SgdTable("dup")));
  EXPECT_EQ(again.shard_table_ids, table.shard_table_ids);
}

// Several threads share one client, each overlapping its next Pull with
// a Push, as a training loop does; every update lands.
TEST_F(ClusterTest, SharedClientWithAsyncCallsFromManyThreads) {
  StartShards(2);
  // Three connections to each shard, taken in turn by the calls.
  auto client = Connect(proto::FLOAT32, absl::Seconds(5),
                        /*channels_per_shard=*/3);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("shared")));
  constexpr int kThreads = 4, kSteps = 50;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Thread t owns keys t*1000 .. t*1000+99; each step pushes -1 to them.
      std::vector<uint64_t> keys(100);
      for (int i = 0; i < 100; ++i) keys[i] = t * 1000 + i;
      std::vector<float> grads(keys.size() * kDim, 1.0f);
      std::vector<float> next(keys.size() * kDim);
      std::future<absl::Status> pull =
          client->PullAsync(table, keys, absl::MakeSpan(next));
      for (int step = 0; step < kSteps; ++step) {
        ASSERT_OK(pull.get());
        ASSERT_EQ(next[0], -static_cast<float>(step));
        ASSERT_OK(client->PushAsync(table, keys, grads).get());
        pull = client->PullAsync(table, keys, absl::MakeSpan(next));
      }
      ASSERT_OK(pull.get());
      EXPECT_EQ(next.back(), -static_cast<float>(kSteps));
    });
  }
  for (auto& thread : threads) thread.join();
}

TEST_F(ClusterTest, ClientOptionsThatCannotWorkAreRefused) {
  client::ClientOptions options;
  EXPECT_THAT(client::Client::Connect(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("servers is empty")));
  options.servers = {"127.0.0.1:1"};
  options.channels_per_shard = 0;
  EXPECT_THAT(client::Client::Connect(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("channels_per_shard")));
}

TEST_F(ClusterTest, Float16OnTheWire) {
  StartShards(2);
  auto client = Connect(proto::FLOAT16);
  proto::TableConfig config = SgdTable("half");
  config.mutable_initializer()->set_kind(proto::InitializerConfig::UNIFORM);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table, client->CreateTable(config));
  auto exact = Connect(proto::FLOAT32);
  std::vector<uint64_t> keys(500);
  for (int i = 0; i < 500; ++i) keys[i] = i * 31 + 7;
  std::vector<float> half_values(keys.size() * kDim),
      float_values(keys.size() * kDim);
  ASSERT_OK(client->Pull(table, keys, absl::MakeSpan(half_values)));
  ASSERT_OK(exact->Pull(table, keys, absl::MakeSpan(float_values)));
  for (size_t i = 0; i < half_values.size(); ++i) {
    // Values in [-0.01, 0.01): half precision keeps ~11 significant bits.
    EXPECT_NEAR(half_values[i], float_values[i], 1e-5) << i;
  }
}

// Sends malformed requests straight to one shard and checks the code, the
// message and that the table did not change.
TEST_F(ClusterTest, BadInputIsRefusedAndChangesNothing) {
  StartShards(2, {"--max_keys_per_request=100"});
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("strict")));
  // Find keys that belong to shard 0 and one that belongs to shard 1.
  std::vector<uint64_t> mine;
  uint64_t foreign = 0;
  for (uint64_t k = 1; mine.size() < 4 || foreign == 0; ++k) {
    if (ShardOfKey(k, 2) == 0) {
      if (mine.size() < 4) mine.push_back(k);
    } else if (foreign == 0) {
      foreign = k;
    }
  }
  std::vector<float> ones(mine.size() * kDim, 1.0f);
  ASSERT_OK(client->Push(table, mine, ones));

  auto stub = proto::EmbeddingService::NewStub(
      grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  const uint32_t id = table.shard_table_ids[0];
  const auto pack = [](const std::vector<uint64_t>& keys) {
    return std::string(reinterpret_cast<const char*>(keys.data()),
                       keys.size() * 8);
  };
  const auto floats = [](const std::vector<float>& v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  struct Case {
    std::string name;
    proto::PushRequest push;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  proto::PushRequest base;
  base.set_table_id(id);
  base.set_keys(pack(mine));
  base.set_gradients(floats(ones));
  {
    Case c{"unknown table", base, grpc::StatusCode::NOT_FOUND,
           "no table with id 42"};
    c.push.set_table_id(42);
    cases.push_back(c);
  }
  {
    Case c{"keys not whole uint64s", base, grpc::StatusCode::INVALID_ARGUMENT,
           "not a multiple of 8"};
    c.push.set_keys(pack(mine).substr(0, 13));
    cases.push_back(c);
  }
  {
    Case c{"empty", base, grpc::StatusCode::INVALID_ARGUMENT, "empty request"};
    c.push.clear_keys();
    c.push.clear_gradients();
    cases.push_back(c);
  }
  {
    Case c{"dim mismatch", base, grpc::StatusCode::INVALID_ARGUMENT,
           "need 128 bytes of float32 gradients, got 124"};
    c.push.set_gradients(floats(ones).substr(0, 124));
    cases.push_back(c);
  }
  {
    Case c{"NaN gradient", base, grpc::StatusCode::INVALID_ARGUMENT, "is nan"};
    std::vector<float> bad = ones;
    bad[5] = std::numeric_limits<float>::quiet_NaN();
    c.push.set_gradients(floats(bad));
    cases.push_back(c);
  }
  {
    Case c{"Inf gradient", base, grpc::StatusCode::INVALID_ARGUMENT, "is inf"};
    std::vector<float> bad = ones;
    bad[30] = std::numeric_limits<float>::infinity();
    c.push.set_gradients(floats(bad));
    cases.push_back(c);
  }
  {
    Case c{"over the key limit", base, grpc::StatusCode::RESOURCE_EXHAUSTED,
           "at most 100"};
    std::vector<uint64_t> many(101, mine[0]);
    c.push.set_keys(pack(many));
    c.push.set_gradients(floats(std::vector<float>(101 * kDim, 1.0f)));
    cases.push_back(c);
  }
  {
    Case c{"key of another shard", base, grpc::StatusCode::FAILED_PRECONDITION,
           "belongs to shard 1 of 2, but this is shard 0"};
    std::vector<uint64_t> mixed = mine;
    mixed[2] = foreign;
    c.push.set_keys(pack(mixed));
    cases.push_back(c);
  }
  {
    Case c{"unknown value type", base, grpc::StatusCode::INVALID_ARGUMENT,
           "unknown value_type"};
    c.push.set_value_type(static_cast<proto::ValueType>(7));
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    grpc::ClientContext context;
    proto::PushResponse response;
    const grpc::Status status = stub->Push(&context, c.push, &response);
    EXPECT_EQ(status.error_code(), c.code)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  // Pull shares the key checks; one case of each kind that differs.
  {
    grpc::ClientContext context;
    proto::PullRequest pull;
    pull.set_table_id(id);
    pull.set_keys(std::string(7, 'x'));
    proto::PullResponse response;
    EXPECT_EQ(stub->Pull(&context, pull, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  // Bytes that are no PullRequest or PushRequest at all: a tag without a
  // value, a keys field longer than the message, field number 0.
  {
    grpc::GenericStub generic(
        grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
    const std::string valid_push = base.SerializeAsString();
    for (const char* method : {"Pull", "Push"}) {
      for (const std::string& bytes :
           {std::string("\x08", 1), valid_push.substr(0, valid_push.size() - 3),
            std::string("\x00\x01\x02", 3)}) {
        grpc::ClientContext context;
        grpc::Slice slice(bytes.data(), bytes.size());
        grpc::ByteBuffer response;
        const grpc::Status status = wire::BulkUnaryCall(
            generic, absl::StrCat("/embedps.proto.EmbeddingService/", method),
            &context, grpc::ByteBuffer(&slice, 1), &response);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << method << " of " << bytes.size() << " bytes";
        EXPECT_THAT(status.error_message(),
                    HasSubstr(absl::StrCat("cannot parse embedps.proto.",
                                           method, "Request")));
      }
    }
  }
  // A different spec under the same name.
  {
    proto::TableConfig other = SgdTable("strict");
    other.set_dim(kDim * 2);
    EXPECT_THAT(client->CreateTable(other),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("different spec")));
  }
  // Nothing changed: the rows still hold exactly the one good push.
  std::vector<float> values(mine.size() * kDim);
  ASSERT_OK(client->Pull(table, mine, absl::MakeSpan(values)));
  for (float v : values) EXPECT_EQ(v, -1.0f);
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  EXPECT_EQ(stats[0].table(0).rows(), mine.size());
  EXPECT_EQ(stats[0].table(0).push_requests(), 1u);
  EXPECT_EQ(stats[0].rejected_requests().at("wrong_shard"), 1u);
  EXPECT_EQ(stats[0].rejected_requests().at("non_finite_gradient"), 2u);
  EXPECT_EQ(stats[0].rejected_requests().at("malformed_request"), 6u);
  // A read-only Pull (Lookup) takes the same checks.
  {
    grpc::ClientContext context;
    proto::PullRequest lookup;
    lookup.set_table_id(id);
    lookup.set_read_only(true);
    std::vector<uint64_t> mixed = mine;
    mixed[0] = foreign;
    lookup.set_keys(pack(mixed));
    proto::PullResponse response;
    const grpc::Status status = stub->Pull(&context, lookup, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("belongs to shard 1"));
  }
}

// Responses to a third of the pushes are dropped after the push was
// applied; the client retries each; every update must land exactly once.
TEST_F(ClusterTest, RetriedPushesAreAppliedExactlyOnce) {
  StartShards(1, {"--TEST_drop_push_response_probability=0.3"});
  client::ClientOptions options;
  options.servers = addresses_;
  options.retry.initial_backoff = absl::Microseconds(200);
  options.retry.max_backoff = absl::Milliseconds(2);
  ASSERT_OK_AND_ASSIGN(auto client, client::Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("once")));
  constexpr int kPushes = 10000;
  const std::vector<uint64_t> keys = {11, 12, 13};
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  for (int i = 0; i < kPushes; ++i) ASSERT_OK(client->Push(table, keys, grads));
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(client->Pull(table, keys, absl::MakeSpan(values)));
  for (float v : values) ASSERT_EQ(v, -static_cast<float>(kPushes));
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  EXPECT_EQ(stats[0].table(0).push_requests(), static_cast<uint64_t>(kPushes));
  // About 30% of 10k pushes were retried at least once.
  EXPECT_GT(stats[0].duplicate_pushes(), 2000u);
  std::printf("pushes %d, retries acknowledged without reapplying: %llu\n",
              kPushes,
              static_cast<unsigned long long>(stats[0].duplicate_pushes()));
}

TEST_F(ClusterTest, CoordinationBarrierWaitAndTimeouts) {
  StartShards(2);
  // Three workers, each with its own client, meet at a barrier twice and
  // exchange their ranks through the store.
  std::vector<std::thread> workers;
  std::atomic<int> through{0};
  for (int rank = 0; rank < 3; ++rank) {
    workers.emplace_back([&, rank] {
      auto store = client::CoordinationClient::Create(addresses_[0]);
      ASSERT_OK(store->Set(absl::StrCat("addr/", rank),
                           absl::StrCat("worker-", rank)));
      ASSERT_OK_AND_ASSIGN(uint64_t g1,
                           store->Barrier("start", 3, absl::Seconds(20)));
      EXPECT_EQ(g1, 1u);
      ASSERT_OK_AND_ASSIGN(auto all, store->Wait({"addr/0", "addr/1", "addr/2"},
                                                 absl::Seconds(20)));
      EXPECT_EQ(all[2], "worker-2");
      ASSERT_OK_AND_ASSIGN(uint64_t g2,
                           store->Barrier("start", 3, absl::Seconds(20)));
      EXPECT_EQ(g2, 2u);
      through.fetch_add(1);
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(through.load(), 3);

  auto store = client::CoordinationClient::Create(addresses_[0]);
  EXPECT_THAT(store->Wait({"addr/0", "never"}, absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("missing: never")));
  EXPECT_THAT(
      store->Barrier("lonely", 2, absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1 of 2")));
  EXPECT_THAT(store->Get("never"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->Set("", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

proto::TableConfig SteppedTable(const std::string& name,
                                proto::ConsistencyConfig::Mode mode,
                                uint32_t staleness = 0,
                                uint32_t timeout_ms = 0) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.5f);
  config.mutable_consistency()->set_mode(mode);
  config.mutable_consistency()->set_staleness(staleness);
  config.mutable_consistency()->set_timeout_ms(timeout_ms);
  return config;
}

// SYNC: two workers push step 0; a Pull for step 1 waits for both, and the
// table shows one Adagrad update with the summed gradient (not two).
TEST_F(ClusterTest, SyncModeAppliesEachStepOnceWithTheSummedGradient) {
  StartShards(2, {"--num_workers=2"});
  const proto::TableConfig config =
      SteppedTable("bsp", proto::ConsistencyConfig::SYNC);
  auto worker_a = Connect();
  auto worker_b = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       worker_a->CreateTable(config));
  ASSERT_OK_AND_ASSIGN(client::TableHandle table_b,
                       worker_b->CreateTable(config));

  std::vector<uint64_t> keys(200);
  for (int i = 0; i < 200; ++i) keys[i] = 1000 + i;
  std::vector<float> initial(keys.size() * kDim);
  ASSERT_OK(worker_a->Pull(table, keys, absl::MakeSpan(initial), /*step=*/0));
  std::vector<float> ga(keys.size() * kDim), gb(keys.size() * kDim);
  for (size_t i = 0; i < ga.size(); ++i) {
    ga[i] = 0.01f * (i % 17) - 0.05f;
    gb[i] = 0.02f * (i % 5) + 0.01f;
  }
  ASSERT_OK(worker_a->Push(table, keys, ga, /*step=*/0));

  // Worker A's Pull for step 1 must wait for worker B's step 0.
  std::atomic<bool> pulled{false};
  std::vector<float> after_a(keys.size() * kDim);
  std::thread waiter([&] {
    ASSERT_OK(worker_a->Pull(table, keys, absl::MakeSpan(after_a), /*step=*/1));
    pulled.store(true);
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(pulled.load())
      << "a SYNC Pull did not wait for the other worker";
  ASSERT_OK(worker_b->Push(table_b, keys, gb, /*step=*/0));
  waiter.join();
  EXPECT_TRUE(pulled.load());

  // The expected rows: one update with ga + gb, from the same initial rows.
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec spec,
                       server::SpecFromConfig(config));
  ASSERT_OK_AND_ASSIGN(auto reference, embedding::Table::Create(spec));
  std::vector<float> scratch(keys.size() * kDim);
  ASSERT_OK(reference->Pull(keys, absl::MakeSpan(scratch)));
  EXPECT_EQ(scratch, initial);
  std::vector<float> sum(ga.size());
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = ga[i] + gb[i];
  ASSERT_OK(reference->Push(keys, sum));
  std::vector<float> want(keys.size() * kDim);
  ASSERT_OK(reference->Pull(keys, absl::MakeSpan(want)));
  EXPECT_EQ(after_a, want);
  std::vector<float> after_b(keys.size() * kDim);
  ASSERT_OK(worker_b->Pull(table_b, keys, absl::MakeSpan(after_b), /*step=*/1));
  EXPECT_EQ(after_b, want);
}

TEST_F(ClusterTest, SyncModeTimesOutClearlyWhenAWorkerIsMissing) {
  StartShards(2, {"--num_workers=2"});
  auto worker = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       worker->CreateTable(SteppedTable(
                           "bsp_timeout", proto::ConsistencyConfig::SYNC, 0,
                           /*timeout_ms=*/300)));
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(worker->Pull(table, keys, absl::MakeSpan(values), 0));
  ASSERT_OK(
      worker->Push(table, keys, std::vector<float>(values.size(), 0.1f), 0));
  const absl::Time start = absl::Now();
  EXPECT_THAT(worker->Pull(table, keys, absl::MakeSpan(values), 1),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 2 workers have pushed it")));
  // Answered after the table's timeout, without client-side retries.
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
}

// SSP with staleness 1: a worker may be one step ahead of the slowest.
TEST_F(ClusterTest, SspModeBoundsHowFarAWorkerRunsAhead) {
  StartShards(1, {"--num_workers=2"});
  const proto::TableConfig config =
      SteppedTable("ssp", proto::ConsistencyConfig::SSP, /*staleness=*/1);
  auto fast = Connect();
  auto slow = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table, fast->CreateTable(config));
  ASSERT_OK_AND_ASSIGN(client::TableHandle slow_table,
                       slow->CreateTable(config));
  const std::vector<uint64_t> keys = {4, 5};
  std::vector<float> values(keys.size() * kDim);
  const std::vector<float> grads(values.size(), 0.1f);
  for (uint64_t step = 0; step < 2; ++step) {
    ASSERT_OK(fast->Pull(table, keys, absl::MakeSpan(values), step));
    ASSERT_OK(fast->Push(table, keys, grads, step));
  }
  // Step 2 needs every worker past step 0; the slow one has done nothing.
  std::atomic<bool> pulled{false};
  std::thread waiter([&] {
    std::vector<float> out(values.size());
    ASSERT_OK(fast->Pull(table, keys, absl::MakeSpan(out), 2));
    pulled.store(true);
  });
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_FALSE(pulled.load()) << "SSP let a worker run 2 steps ahead";
  ASSERT_OK(
      slow->Push(slow_table, {}, {}, 0));  // the slow worker's empty step 0
  waiter.join();
  EXPECT_TRUE(pulled.load());
}

TEST_F(ClusterTest, PrometheusMetricsMatchTheStatsRpc) {
  StartShards(1, {"--metrics_port=0"});
  ASSERT_GT(servers_[0]->metrics_port(), 0);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("seen")));
  std::vector<float> values(3 * kDim);
  ASSERT_OK(client->Pull(table, {{1, 2, 3}}, absl::MakeSpan(values)));
  ASSERT_OK(
      client->Pull(table, {{4}}, absl::MakeSpan(values).subspan(0, kDim)));
  httplib::Client http("127.0.0.1", servers_[0]->metrics_port());
  auto response = http.Get("/metrics");
  ASSERT_TRUE(response) << "no answer from the metrics port";
  EXPECT_EQ(response->status, 200);
  const std::string& text = response->body;
  EXPECT_THAT(text, HasSubstr("embedps_rpc_calls_total{method=\"Pull\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("embedps_rpc_calls_total{method=\"CreateTable\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("embedps_table_rows{table=\"seen\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("embedps_keys_pulled_total{table=\"seen\"} 4\n"));
  EXPECT_THAT(
      text,
      HasSubstr("embedps_rpc_latency_seconds_count{method=\"Pull\"} 2\n"));
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  for (const auto& rpc : stats[0].rpc()) {
    if (rpc.method() == "Pull") {
      EXPECT_EQ(rpc.calls(), 2u);
    }
  }
}

// Server reflection (what grpcurl uses) lists our services. The reflection
// protos are not installed by Debian, so the request is written by hand:
// ServerReflectionRequest{list_services: ""} is field 7, empty: 3a 00.
TEST_F(ClusterTest, ReflectionListsTheServices) {
  StartShards(1);
  auto channel =
      grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  const auto wait = [&](int want_tag) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(tag, reinterpret_cast<void*>(want_tag));
    return ok;
  };
  auto call = stub.PrepareCall(
      &context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(wait(1));
  grpc::Slice request_slice(std::string("\x3a\x00", 2));
  grpc::ByteBuffer request(&request_slice, 1);
  call->Write(request, reinterpret_cast<void*>(2));
  ASSERT_TRUE(wait(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(wait(3));
  call->WritesDone(reinterpret_cast<void*>(4));
  wait(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  wait(5);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices)
    bytes += std::string(slice.begin(), slice.end());
  EXPECT_THAT(bytes, HasSubstr("embedps.proto.EmbeddingService"));
  EXPECT_THAT(bytes, HasSubstr("embedps.proto.Coordination"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
}

TEST_F(ClusterTest, HealthServiceAnswersServing) {
  StartShards(1);
  auto channel =
      grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  // grpc.health.v1.HealthCheckRequest{service: ""} serialises to nothing;
  // the response HealthCheckResponse{status: SERVING} is bytes 08 01.
  grpc::Slice empty;
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes += std::string(s.begin(), s.end());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// SIGTERM while a call is in flight: the server stops taking calls but
// lets the in-flight one finish with its own answer, then exits 0. The
// in-flight call is a SYNC Pull waiting for a worker that never comes, so
// its answer is the table's timeout, 1 s later.
TEST_F(ClusterTest, SigtermLetsInFlightCallsFinish) {
  StartShards(1, {"--num_workers=2", "--shutdown_grace=20s"});
  auto worker = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       worker->CreateTable(SteppedTable(
                           "drain", proto::ConsistencyConfig::SYNC, 0,
                           /*timeout_ms=*/1000)));
  const std::vector<uint64_t> keys = {1};
  std::vector<float> values(kDim);
  ASSERT_OK(worker->Pull(table, keys, absl::MakeSpan(values), 0));
  ASSERT_OK(worker->Push(table, keys, std::vector<float>(kDim, 1.0f), 0));
  absl::Status in_flight;
  std::thread pull([&] {
    in_flight = worker->Pull(table, keys, absl::MakeSpan(values), 1);
  });
  absl::SleepFor(
      absl::Milliseconds(300));  // the Pull is now waiting on the server
  servers_[0]->Signal(SIGTERM);
  pull.join();
  EXPECT_THAT(in_flight, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                  HasSubstr("waited 1s for step 0")));
  EXPECT_EQ(servers_[0]->Wait(), 0);
}

TEST_F(ClusterTest, SigtermStopsGracefullyAndClientsSeeUnavailable) {
  StartShards(1);
  auto client = Connect(proto::FLOAT32, absl::Seconds(1));
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("t")));
  EXPECT_EQ(servers_[0]->Stop(), 0);
  std::vector<float> values(kDim);
  EXPECT_THAT(client->Pull(table, {{1}}, absl::MakeSpan(values)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shard 0")));
}

}  // namespace
}  // namespace embedps
