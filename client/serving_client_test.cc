// The serving client against real serving replicas in this process: two
// serving shards of two replicas each, following one training shard.
#include "client/serving_client.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/client.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/shard.h"

namespace embedps::client {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;

class ServingClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/serving_client_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
    server::ShardOptions training;
    training.checkpoint_root = ::testing::TempDir();
    ASSERT_OK_AND_ASSIGN(training_, server::Shard::Start(training));
    ClientOptions options;
    options.servers = {training_->address()};
    ASSERT_OK_AND_ASSIGN(trainer_, Client::Connect(options));
    proto::TableConfig config;
    config.set_name("emb");
    config.set_dim(kDim);
    config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
    config.mutable_optimizer()->set_learning_rate(1.0f);
    ASSERT_OK_AND_ASSIGN(table_, trainer_->CreateTable(config));
    ASSERT_OK(trainer_->Publish(0, "").status());
    for (uint64_t k = 1; k <= 40; ++k) keys_.push_back(k);
    std::vector<float> grads(keys_.size() * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.01f * i;
    ASSERT_OK(trainer_->Push(table_, keys_, grads));
    Client::CheckpointOptions checkpoint;
    checkpoint.root = root_;
    checkpoint.step = 5;
    ASSERT_OK(trainer_->Checkpoint(checkpoint).status());
    for (int shard = 0; shard < 2; ++shard) {
      replicas_.emplace_back();
      for (int r = 0; r < 2; ++r) {
        ASSERT_OK_AND_ASSIGN(auto replica, StartReplica(shard));
        replicas_.back().push_back(std::move(replica));
      }
    }
  }

  absl::StatusOr<std::unique_ptr<server::Shard>> StartReplica(
      int shard, int port = 0, int num_shards = 2) {
    server::ShardOptions options;
    options.port = port;
    options.role = server::ShardRole::kServing;
    options.follow.checkpoint_root = root_;
    options.follow.training_servers = {training_->address()};
    options.follow.shard_index = shard;
    options.follow.num_shards = num_shards;
    options.follow.checkpoint_poll = absl::Milliseconds(50);
    return server::Shard::Start(options);
  }

  ServingClientOptions Options() {
    ServingClientOptions options;
    for (const auto& shard : replicas_) {
      options.replicas.emplace_back();
      for (const auto& replica : shard) {
        options.replicas.back().push_back(replica->address());
      }
    }
    options.deadline = absl::Seconds(5);
    options.attempt_timeout = absl::Seconds(1);
    return options;
  }

  // Bags of the training rows, pooled here.
  std::vector<float> Expected(const std::vector<uint64_t>& keys,
                              const std::vector<int32_t>& offsets,
                              proto::Pooling pooling) {
    std::vector<float> rows(keys.size() * kDim);
    EXPECT_OK(trainer_->Lookup(table_, keys, absl::MakeSpan(rows)));
    std::vector<float> out((offsets.size() - 1) * kDim, 0.0f);
    for (size_t b = 0; b + 1 < offsets.size(); ++b) {
      for (int k = offsets[b]; k < offsets[b + 1]; ++k) {
        for (int d = 0; d < kDim; ++d) out[b * kDim + d] += rows[k * kDim + d];
      }
      if (pooling == proto::POOLING_MEAN && offsets[b + 1] > offsets[b]) {
        for (int d = 0; d < kDim; ++d) {
          out[b * kDim + d] /= static_cast<float>(offsets[b + 1] - offsets[b]);
        }
      }
    }
    return out;
  }

  std::string root_;
  std::unique_ptr<server::Shard> training_;
  std::unique_ptr<Client> trainer_;
  TableHandle table_;
  std::vector<uint64_t> keys_;
  std::vector<std::vector<std::unique_ptr<server::Shard>>> replicas_;
};

TEST_F(ServingClientTest, PoolsAcrossShardsLikeTheTrainingRows) {
  ASSERT_OK_AND_ASSIGN(auto client, ServingClient::Connect(Options()));
  // Keys of both shards, repeated across bags, one empty bag.
  const std::vector<uint64_t> keys = {1, 2, 3, 3, 9, 1, 40, 17};
  const std::vector<int32_t> offsets = {0, 3, 3, 5, 8};
  std::vector<ServingSlot> slots(2);
  slots[0] = {"emb", kDim, keys, offsets, proto::POOLING_SUM};
  slots[1] = {"emb", kDim, keys, offsets, proto::POOLING_MEAN};
  std::vector<std::vector<float>> out;
  uint64_t version = 0;
  ASSERT_OK(client->Lookup(slots, &out, 0, &version));
  EXPECT_EQ(version, 5u);
  ASSERT_EQ(out.size(), 2u);
  const std::vector<float> sum = Expected(keys, offsets, proto::POOLING_SUM);
  const std::vector<float> mean = Expected(keys, offsets, proto::POOLING_MEAN);
  ASSERT_EQ(out[0].size(), sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    EXPECT_FLOAT_EQ(out[0][i], sum[i]) << i;
    EXPECT_FLOAT_EQ(out[1][i], mean[i]) << i;
  }
  // The exact version, on every shard.
  ASSERT_OK(client->Lookup(slots, &out, 5, &version));
  EXPECT_EQ(version, 5u);
}

// Every way a Lookup can go — one serving shard (the replica pools) or two
// (partial sums added by the client), with or without the cache (the
// client pools rows) — answers the training rows' pooling.
TEST_F(ServingClientTest, EveryPathPoolsLikeTheTrainingRows) {
  ASSERT_OK_AND_ASSIGN(auto whole, StartReplica(0, 0, 1));
  ServingClientOptions one = Options();
  one.replicas = {{whole->address()}};
  const std::vector<uint64_t> keys = {1, 2, 3, 3, 9, 1, 40, 17, 1000};
  const std::vector<int32_t> offsets = {0, 3, 3, 5, 9, 9};
  std::vector<int32_t> identity(keys.size() + 1);
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = i;
  std::vector<ServingSlot> slots = {
      {"emb", kDim, keys, offsets, proto::POOLING_SUM},
      {"emb", kDim, keys, offsets, proto::POOLING_MEAN},
      {"emb", kDim, keys, {}, proto::POOLING_NONE},
      {"emb", kDim, keys, {}, proto::POOLING_MEAN},
      {"emb", kDim, {}, {}, proto::POOLING_SUM},
  };
  const std::vector<std::vector<float>> expected = {
      Expected(keys, offsets, proto::POOLING_SUM),
      Expected(keys, offsets, proto::POOLING_MEAN),
      Expected(keys, identity, proto::POOLING_SUM),
      Expected(keys, identity, proto::POOLING_SUM),
      {},
  };
  for (ServingClientOptions options : {one, Options()}) {
    for (size_t cache : {0, 6400}) {
      options.cache_rows = cache;
      ASSERT_OK_AND_ASSIGN(auto client, ServingClient::Connect(options));
      // The second round reads every row from the cache when it is on:
      // the version is still the one the rows were read from.
      for (int twice = 0; twice < 2; ++twice) {
        SCOPED_TRACE(::testing::Message()
                     << options.replicas.size() << " shard(s), cache " << cache
                     << ", round " << twice);
        std::vector<std::vector<float>> out;
        uint64_t version = 0;
        ASSERT_OK(client->Lookup(slots, &out, 0, &version));
        EXPECT_EQ(version, 5u);
        ASSERT_EQ(out.size(), expected.size());
        for (size_t s = 0; s < expected.size(); ++s) {
          ASSERT_EQ(out[s].size(), expected[s].size()) << "slot " << s;
          for (size_t i = 0; i < expected[s].size(); ++i) {
            EXPECT_FLOAT_EQ(out[s][i], expected[s][i]) << "slot " << s;
          }
        }
      }
      if (cache > 0) {
        // 7 distinct rows: read once, then all from the cache.
        EXPECT_EQ(client->stats().cache_misses, 7u);
        EXPECT_EQ(client->stats().cache_hits, 7u);
      }
    }
  }
  // float16 on the wire: within half precision.
  one.wire_type = proto::FLOAT16;
  ASSERT_OK_AND_ASSIGN(auto half, ServingClient::Connect(one));
  std::vector<std::vector<float>> out;
  ASSERT_OK(half->Lookup(slots, &out));
  for (size_t i = 0; i < expected[0].size(); ++i) {
    EXPECT_NEAR(out[0][i], expected[0][i],
                1e-3 * std::max(1.0f, std::abs(expected[0][i])));
  }
}

TEST_F(ServingClientTest, TheCacheAnswersRepeatedKeys) {
  ServingClientOptions options = Options();
  options.cache_rows = 1000;
  options.cache_ttl = absl::Hours(1);
  ASSERT_OK_AND_ASSIGN(auto client, ServingClient::Connect(options));
  std::vector<ServingSlot> slots = {
      {"emb", kDim, keys_, {}, proto::POOLING_NONE}};
  std::vector<std::vector<float>> first, second;
  ASSERT_OK(client->Lookup(slots, &first));
  EXPECT_EQ(client->stats().cache_misses, keys_.size());
  ASSERT_OK(client->Lookup(slots, &second));
  EXPECT_EQ(client->stats().cache_hits, keys_.size());
  EXPECT_EQ(first, second);
}

TEST_F(ServingClientTest, AKilledReplicaFailsOverAndARestartedOneServesAgain) {
  ServingClientOptions options = Options();
  options.down_for = absl::Milliseconds(100);
  ASSERT_OK_AND_ASSIGN(auto client, ServingClient::Connect(options));
  std::vector<ServingSlot> slots = {
      {"emb", kDim, keys_, {}, proto::POOLING_NONE}};
  std::vector<std::vector<float>> before, after;
  ASSERT_OK(client->Lookup(slots, &before));
  const int port = replicas_[0][0]->port();
  replicas_[0][0].reset();  // shard 0 has one replica left
  for (int i = 0; i < 10; ++i) {
    ASSERT_OK(client->Lookup(slots, &after));
    EXPECT_EQ(after, before);
  }
  EXPECT_GE(client->stats().failovers, 1u);
  // Back on the same port: it follows training again and is used.
  ASSERT_OK_AND_ASSIGN(replicas_[0][0], StartReplica(0, port));
  replicas_[0][1].reset();  // now only the restarted one serves shard 0
  absl::SleepFor(absl::Milliseconds(150));  // past down_for
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK(client->Lookup(slots, &after));
    EXPECT_EQ(after, before);
  }
}

TEST_F(ServingClientTest, BadSlotsAndNoReplicasAreRefused) {
  ASSERT_OK_AND_ASSIGN(auto client, ServingClient::Connect(Options()));
  const std::vector<int32_t> bad_offsets = {0, 5, 2};
  std::vector<ServingSlot> slots = {
      {"emb", kDim, keys_, bad_offsets, proto::POOLING_SUM}};
  std::vector<std::vector<float>> out;
  EXPECT_THAT(client->Lookup(slots, &out),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("without decreasing")));
  slots = {{"emb", 0, keys_, {}, proto::POOLING_SUM}};
  EXPECT_THAT(client->Lookup(slots, &out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dim")));
  slots = {{"nope", kDim, keys_, {}, proto::POOLING_SUM}};
  EXPECT_THAT(client->Lookup(slots, &out),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no table")));
  // Another dim than the table's: named, for every pooling.
  for (proto::Pooling pooling : {proto::POOLING_SUM, proto::POOLING_NONE}) {
    slots = {{"emb", 2 * kDim, keys_, {}, pooling}};
    EXPECT_THAT(client->Lookup(slots, &out),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("table 'emb' has dim 4, not the 8 given")));
  }
  ServingClientOptions empty;
  EXPECT_THAT(ServingClient::Connect(empty).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // Every replica of a shard gone: the deadline, naming the shard.
  ServingClientOptions options = Options();
  options.deadline = absl::Milliseconds(300);
  options.attempt_timeout = absl::Milliseconds(100);
  ASSERT_OK_AND_ASSIGN(auto lonely, ServingClient::Connect(options));
  replicas_[1].clear();
  slots = {{"emb", kDim, keys_, {}, proto::POOLING_SUM}};
  const absl::Status status = lonely->Lookup(slots, &out);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("serving shard 1"));
}

// Replicas that are not what their position says are refused at Connect,
// naming them: another shard, another shard count, a training shard,
// another cluster.
TEST_F(ServingClientTest, ReplicasOfAnotherShardRoleOrClusterAreRefused) {
  ServingClientOptions swapped = Options();
  std::swap(swapped.replicas[0][1], swapped.replicas[1][1]);
  const absl::Status wrong_shard = ServingClient::Connect(swapped).status();
  EXPECT_THAT(wrong_shard, StatusIs(absl::StatusCode::kFailedPrecondition,
                                    HasSubstr(swapped.replicas[0][1])));
  EXPECT_THAT(wrong_shard.message(),
              HasSubstr("says it is a serving shard 1 of 2"));
  ServingClientOptions three = Options();
  three.replicas.push_back({three.replicas[1][0]});
  EXPECT_THAT(ServingClient::Connect(three).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("serving shard 1 of 2")));
  ServingClientOptions training = Options();
  training.replicas[1][0] = training_->address();
  EXPECT_THAT(ServingClient::Connect(training).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("a training shard 0 of 1")));
  ServingClientOptions other = Options();
  other.cluster_id = "prod";
  EXPECT_THAT(ServingClient::Connect(other).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("of cluster 'prod'")));
}

// A replica down at Connect serves nothing until it has stated its
// identity; once it is up (asked again in the background), it serves.
TEST_F(ServingClientTest,
       AReplicaDownAtConnectServesOnceItHasIdentifiedItself) {
  const int port = replicas_[1][0]->port();
  replicas_[1].clear();  // shard 1: nothing answers
  ServingClientOptions options = Options();
  options.identify_timeout = absl::Milliseconds(300);
  options.down_for = absl::Milliseconds(100);
  options.deadline = absl::Milliseconds(500);
  options.attempt_timeout = absl::Milliseconds(200);
  options.replicas[1] = {"127.0.0.1:" + std::to_string(port)};
  ASSERT_OK_AND_ASSIGN(auto client, ServingClient::Connect(options));
  std::vector<ServingSlot> slots = {
      {"emb", kDim, keys_, {}, proto::POOLING_NONE}};
  std::vector<std::vector<float>> out;
  EXPECT_THAT(client->Lookup(slots, &out),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("no replica of serving shard 1 has stated")));
  ASSERT_OK_AND_ASSIGN(auto back, StartReplica(1, port));
  absl::Status served;
  for (int i = 0; i < 50; ++i) {
    served = client->Lookup(slots, &out);
    if (served.ok()) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_OK(served);
}

}  // namespace
}  // namespace embedps::client
