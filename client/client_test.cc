// The client against real shards in this process (server::Shard on
// 127.0.0.1:0): routing, dedup and ordering, Lookup, float16, async calls
// from many threads, exactly-once retries, SYNC and SSP steps.
#include "client/client.h"

#include <atomic>
#include <cstdio>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "embedding/table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tables.pb.h"
#include "server/table_config.h"
#include "testing/in_process_cluster.h"

namespace embedps {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

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

server::ShardOptions TwoWorkers() {
  server::ShardOptions options;
  options.num_workers = 2;
  return options;
}

class ClientTest : public testing::ClusterTest {
 protected:
  // Two workers, each with its own client, on one table created by both
  // (as every worker of a job does).
  struct TwoWorkersOnATable {
    std::unique_ptr<client::Client> a, b;
    client::TableHandle table_a, table_b;
  };
  TwoWorkersOnATable ConnectTwoWorkers(const proto::TableConfig& config) {
    TwoWorkersOnATable workers;
    workers.a = Connect();
    workers.b = Connect();
    auto table_a = workers.a->CreateTable(config);
    auto table_b = workers.b->CreateTable(config);
    EXPECT_OK(table_a);
    EXPECT_OK(table_b);
    if (table_a.ok()) workers.table_a = *table_a;
    if (table_b.ok()) workers.table_b = *table_b;
    return workers;
  }
};

TEST_F(ClientTest, EachKeyLandsOnExactlyOneShardAndUpdatesRoundTrip) {
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

// A Pull of many keys is read on several server threads (pieces of 16k
// keys): every row comes back in its place, each created once.
TEST_F(ClientTest, APullSplitOverServerThreadsAnswersEveryRowInPlace) {
  server::ShardOptions threaded;
  threaded.service.pull_threads = 3;
  StartShards(1, threaded);
  auto client = Connect();
  proto::TableConfig config = SgdTable("threaded");
  config.mutable_initializer()->set_kind(proto::InitializerConfig::UNIFORM);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table, client->CreateTable(config));
  constexpr int kKeys = 60000;
  std::vector<uint64_t> keys(kKeys);
  for (int i = 0; i < kKeys; ++i) keys[i] = i * 7919 + 3;
  std::vector<float> pulled(kKeys * kDim), looked_up(kKeys * kDim);
  ASSERT_OK(client->Pull(table, keys, absl::MakeSpan(pulled)));
  // The same rows one key at a time (a Lookup of one key is one piece).
  for (int i = 0; i < kKeys; i += 997) {
    ASSERT_OK(client->Lookup(
        table, {keys[i]}, absl::MakeSpan(looked_up).subspan(i * kDim, kDim)));
    for (int d = 0; d < kDim; ++d) {
      ASSERT_EQ(pulled[i * kDim + d], looked_up[i * kDim + d]) << i;
    }
  }
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  EXPECT_EQ(stats[0].table(0).rows(), static_cast<uint64_t>(kKeys));
  // And after a Push, a threaded Lookup of them all reads every update.
  std::vector<float> grads(kKeys * kDim, 0.5f);
  ASSERT_OK(client->Push(table, keys, grads));
  ASSERT_OK(client->Lookup(table, keys, absl::MakeSpan(looked_up)));
  for (size_t i = 0; i < looked_up.size(); ++i) {
    ASSERT_FLOAT_EQ(looked_up[i], pulled[i] - 0.5f) << i;
  }
}

// Lookup reads like a Pull but changes nothing: stored rows come back as
// they are, keys without a row get the initial values a Pull would give
// them, and no row is created.
TEST_F(ClientTest, LookupReadsWithoutSideEffects) {
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

TEST_F(ClientTest, DuplicatesAndOrderArePreserved) {
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
TEST_F(ClientTest, SharedClientWithAsyncCallsFromManyThreads) {
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

TEST_F(ClientTest, ClientOptionsThatCannotWorkAreRefused) {
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

TEST_F(ClientTest, Float16OnTheWire) {
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

// Responses to a third of the pushes are dropped after the push was
// applied; the client retries each; every update must land exactly once.
TEST_F(ClientTest, RetriedPushesAreAppliedExactlyOnce) {
  server::ShardOptions drop;
  drop.service.TEST_drop_push_response_probability = 0.3;
  StartShards(1, drop);
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
TEST_F(ClientTest, SyncModeAppliesEachStepOnceWithTheSummedGradient) {
  StartShards(2, TwoWorkers());
  const proto::TableConfig config =
      SteppedTable("bsp", proto::ConsistencyConfig::SYNC);
  TwoWorkersOnATable workers = ConnectTwoWorkers(config);
  auto& [worker_a, worker_b, table, table_b] = workers;

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

// A SYNC Pull that has to wait reads the table while it waits and then
// re-reads the keys the steps applied meanwhile changed (all keys, when
// more steps than the server remembers went by): its answer must be what
// a Pull after those steps reads — for pushed keys, untouched ones and
// keys never seen before.
TEST_F(ClientTest, SyncPullsThatWaitAnswerWithTheRowsAfterTheStep) {
  StartShards(2, TwoWorkers());
  const proto::TableConfig config =
      SteppedTable("ahead", proto::ConsistencyConfig::SYNC);
  TwoWorkersOnATable workers = ConnectTwoWorkers(config);
  auto& [worker_a, worker_b, table, table_b] = workers;
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec spec,
                       server::SpecFromConfig(config));
  ASSERT_OK_AND_ASSIGN(auto reference, embedding::Table::Create(spec));

  // Pushed every step; pulled at step 0 but never pushed; new at step 1.
  std::vector<uint64_t> pushed, untouched, fresh;
  for (uint64_t i = 0; i < 100; ++i) {
    pushed.push_back(1000 + i);
    untouched.push_back(2000 + i);
    fresh.push_back(3000 + i);
  }
  std::vector<uint64_t> first = pushed;
  first.insert(first.end(), untouched.begin(), untouched.end());
  std::vector<uint64_t> all = first;
  all.insert(all.end(), fresh.begin(), fresh.end());
  std::vector<float> scratch(all.size() * kDim);
  ASSERT_OK(worker_a->Pull(table, first,
                           absl::MakeSpan(scratch.data(), first.size() * kDim),
                           /*step=*/0));
  ASSERT_OK(reference->Pull(
      first, absl::MakeSpan(scratch.data(), first.size() * kDim)));
  std::vector<float> ga(pushed.size() * kDim), gb(pushed.size() * kDim),
      sum(pushed.size() * kDim);
  for (size_t i = 0; i < ga.size(); ++i) {
    ga[i] = 0.01f * (i % 17) - 0.05f;
    gb[i] = 0.02f * (i % 5) + 0.01f;
    sum[i] = ga[i] + gb[i];
  }
  // Pulls for `step` (waiting for the steps before it), then both workers
  // push the steps from `from` up to it; the Pull must read the rows after
  // them.
  const auto check = [&](uint64_t from, uint64_t step) {
    std::vector<float> got(all.size() * kDim);
    std::thread waiter([&] {
      ASSERT_OK(worker_a->Pull(table, all, absl::MakeSpan(got), step));
    });
    absl::SleepFor(absl::Milliseconds(200));  // the Pull is waiting
    for (uint64_t s = from; s < step; ++s) {
      ASSERT_OK(worker_a->Push(table, pushed, ga, s));
      ASSERT_OK(worker_b->Push(table_b, pushed, gb, s));
      ASSERT_OK(reference->Push(pushed, sum));
    }
    waiter.join();
    std::vector<float> want(all.size() * kDim);
    ASSERT_OK(reference->Pull(all, absl::MakeSpan(want)));
    EXPECT_EQ(got, want) << "Pull for step " << step;
  };
  check(0, 1);
  check(1, 1 + 2 * 8 + 3);  // more steps than the server remembers
}

// Only a Pull for the step after the one being applied reads ahead: one
// for a later step that times out leaves the table as it was.
TEST_F(ClientTest, ASyncPullForAFarStepThatTimesOutCreatesNoRows) {
  StartShards(1, TwoWorkers());
  auto worker = Connect();
  ASSERT_OK_AND_ASSIGN(
      client::TableHandle table,
      worker->CreateTable(SteppedTable("far", proto::ConsistencyConfig::SYNC, 0,
                                       /*timeout_ms=*/300)));
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(worker->Pull(table, keys, absl::MakeSpan(values), 0));
  const std::vector<uint64_t> new_keys = {7, 8, 9, 10};
  std::vector<float> more(new_keys.size() * kDim);
  EXPECT_THAT(worker->Pull(table, new_keys, absl::MakeSpan(more), 5),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(auto stats, worker->Stats());
  EXPECT_EQ(stats[0].table(0).rows(), keys.size());
}

TEST_F(ClientTest, SyncModeTimesOutClearlyWhenAWorkerIsMissing) {
  StartShards(2, TwoWorkers());
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
TEST_F(ClientTest, SspModeBoundsHowFarAWorkerRunsAhead) {
  StartShards(1, TwoWorkers());
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

// A client destroyed while asynchronous Pulls and Pushes are still being
// retried (a job stopping on an error with a server gone): they end with
// CANCELLED before its channels go, instead of their retry alarms firing
// on destroyed channels (a crash at exit, 1 run in ~70 before).
TEST_F(ClientTest, DestroyingAClientEndsItsCallsInFlight) {
  StartShards(1);
  std::unique_ptr<client::Client> client =
      Connect(proto::FLOAT32, /*retry_deadline=*/absl::Seconds(120));
  ASSERT_NE(client, nullptr);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("t")));
  cluster_.shard(0).Shutdown(absl::ZeroDuration());
  const std::vector<uint64_t> keys = {1, 2, 3};
  const std::vector<float> grads(keys.size() * kDim, 1.0f);
  std::vector<float> values(keys.size() * kDim);
  std::future<absl::Status> push = client->PushAsync(table, keys, grads);
  std::future<absl::Status> pull =
      client->PullAsync(table, keys, absl::MakeSpan(values));
  absl::SleepFor(absl::Milliseconds(300));  // a few attempts and backoffs
  client.reset();
  EXPECT_THAT(push.get(), StatusIs(absl::StatusCode::kCancelled,
                                   HasSubstr("client is being destroyed")));
  EXPECT_THAT(pull.get(), StatusIs(absl::StatusCode::kCancelled));
}

}  // namespace
}  // namespace embedps
