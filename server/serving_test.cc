// Serving replicas against a training shard, in this process: a replica
// starts from the latest checkpoint, follows training's publications,
// answers pooled lookups from one version, refuses writes and bad
// requests, keeps serving through a corrupt checkpoint, and waits for a
// checkpoint when its stream has a gap.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "checkpoint/manifest.h"
#include "client/client.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "embedding/initializer.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "proto/serving.grpc.pb.h"
#include "proto/stats.grpc.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "server/shard.h"
#include "server/table_config.h"
#include "wire/bulk_message.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;

proto::TableConfig Table(const std::string& name,
                         proto::ServingConfig::UnknownKeys unknown =
                             proto::ServingConfig::INITIAL_VECTOR) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.set_seed(3);
  config.mutable_initializer()->set_kind(proto::InitializerConfig::UNIFORM);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  config.mutable_serving()->set_unknown_keys(unknown);
  return config;
}

std::string Pack(const std::vector<uint64_t>& keys) {
  return std::string(reinterpret_cast<const char*>(keys.data()),
                     keys.size() * sizeof(uint64_t));
}

std::string PackOffsets(const std::vector<int32_t>& offsets) {
  return std::string(reinterpret_cast<const char*>(offsets.data()),
                     offsets.size() * sizeof(int32_t));
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

class ServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = ::testing::TempDir() + "/serving_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
    ShardOptions training;
    training.checkpoint_root = ::testing::TempDir();
    training.publisher.history_bytes = history_bytes_;
    ASSERT_OK_AND_ASSIGN(training_, Shard::Start(training));
    client::ClientOptions options;
    options.servers = {training_->address()};
    ASSERT_OK_AND_ASSIGN(client_, client::Client::Connect(options));
    ASSERT_OK_AND_ASSIGN(table_, client_->CreateTable(Table("emb")));
    ASSERT_OK_AND_ASSIGN(zeros_, client_->CreateTable(Table(
                                     "zeros", proto::ServingConfig::ZEROS)));
    // The job's first publication turns the change logs on.
    if (publish_first_) {
      ASSERT_OK(client_->Publish(0, "").status());
    }
  }

  void Push(const std::vector<uint64_t>& keys, float g) {
    std::vector<float> grads(keys.size() * kDim, g);
    ASSERT_OK(client_->Push(table_, keys, grads));
  }

  std::vector<float> Pull(const std::vector<uint64_t>& keys) {
    std::vector<float> values(keys.size() * kDim);
    EXPECT_OK(client_->Lookup(table_, keys, absl::MakeSpan(values)));
    return values;
  }

  void Checkpoint(uint64_t step, bool incremental = false) {
    client::Client::CheckpointOptions options;
    options.root = root_;
    options.step = step;
    options.incremental = incremental;
    ASSERT_OK(client_->Checkpoint(options).status());
  }

  absl::StatusOr<std::unique_ptr<Shard>> StartReplica(int index = 0,
                                                      int count = 1,
                                                      uint64_t pinned = 0) {
    ShardOptions serving;
    serving.role = ShardRole::kServing;
    serving.follow.checkpoint_root = root_;
    serving.follow.training_servers = {training_->address()};
    serving.follow.shard_index = index;
    serving.follow.num_shards = count;
    serving.follow.checkpoint_poll = absl::Milliseconds(50);
    serving.follow.pinned_step = pinned;
    serving.follow.storage = replica_storage_;
    return Shard::Start(serving);
  }

  static std::unique_ptr<proto::ServingService::Stub> Stub(
      const Shard& replica) {
    return proto::ServingService::NewStub(grpc::CreateChannel(
        replica.address(), grpc::InsecureChannelCredentials()));
  }

  static proto::ServingVersionResponse Version(const Shard& replica) {
    proto::ServingVersionResponse response;
    grpc::ClientContext context;
    EXPECT_TRUE(
        Stub(replica)
            ->Version(&context, proto::ServingVersionRequest(), &response)
            .ok());
    return response;
  }

  // Waits (without asserting on time) until the replica serves `step`.
  static void AwaitStep(const Shard& replica, uint64_t step) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (Version(replica).step() < step && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_GE(Version(replica).step(), step)
        << Version(replica).ShortDebugString();
  }

  static grpc::Status Lookup(const Shard& replica,
                             const proto::LookupRequest& request,
                             proto::LookupResponse* response) {
    grpc::ClientContext context;
    return Stub(replica)->Lookup(&context, request, response);
  }

  // One slot of `keys`, one key a bag, no pooling.
  static std::vector<float> Rows(const Shard& replica,
                                 const std::vector<uint64_t>& keys,
                                 const std::string& table = "emb") {
    proto::LookupRequest request;
    proto::LookupSlot* slot = request.add_slot();
    slot->set_table(table);
    slot->set_keys(Pack(keys));
    proto::LookupResponse response;
    const grpc::Status status = Lookup(replica, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return status.ok() ? Floats(response.values(0)) : std::vector<float>();
  }

  // A complete checkpoint of `step` whose table files are damaged, written
  // aside and moved under the root whole (as a copy from elsewhere would
  // arrive); returns its name.
  std::string WriteCorruptCheckpoint(uint64_t step) {
    const std::string staging = root_ + "_staging";
    std::filesystem::create_directories(staging);
    client::Client::CheckpointOptions options;
    options.root = staging;
    options.step = step;
    EXPECT_OK(client_->Checkpoint(options).status());
    const std::string name = ::embedps::checkpoint::CheckpointName(step);
    int corrupted = 0;
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(staging + "/" + name)) {
      if (entry.path().extension() != ".sst") continue;
      std::fstream f(entry.path(),
                     std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(100);
      f << "garbage garbage garbage";
      ++corrupted;
    }
    EXPECT_GT(corrupted, 0);
    std::filesystem::rename(staging + "/" + name, root_ + "/" + name);
    return name;
  }

  uint64_t history_bytes_ = uint64_t{64} << 20;
  // The replicas' --serving_storage.
  std::optional<proto::ServingConfig::Storage> replica_storage_;
  bool publish_first_ = true;
  std::string root_;
  std::unique_ptr<Shard> training_;
  std::unique_ptr<client::Client> client_;
  client::TableHandle table_, zeros_;
};

class ServingCheckpointFirstTest : public ServingTest {
 protected:
  ServingCheckpointFirstTest() { publish_first_ = false; }
};

// A job that checkpoints before it first publishes: the first publication
// holds every row (previous_step 0), so a replica that starts from that
// checkpoint, or from one before or after it, follows on at once.
TEST_F(ServingCheckpointFirstTest,
       AReplicaFromACheckpointBeforeTheFirstPublish) {
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  Push({1, 2}, 1.0f);
  Checkpoint(2);
  Push({2, 3}, 0.5f);
  ASSERT_OK(client_->Publish(4, "").status());  // the job's first publish
  Push({3, 4}, 0.25f);
  ASSERT_OK(client_->Publish(6, "").status());
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  AwaitStep(*replica, 6);
  EXPECT_EQ(Rows(*replica, keys), Pull(keys));
  EXPECT_TRUE(Version(*replica).last_error().empty())
      << Version(*replica).last_error();
  // A table created after the first publication: its first publication
  // holds every row too.
  ASSERT_OK_AND_ASSIGN(const client::TableHandle late,
                       client_->CreateTable(Table("late")));
  std::vector<float> grads(2 * kDim, 1.0f);
  ASSERT_OK(client_->Push(late, {7, 8}, grads));
  ASSERT_OK(client_->Publish(8, "").status());
  AwaitStep(*replica, 8);
  std::vector<float> late_rows(2 * kDim);
  ASSERT_OK(client_->Lookup(late, {7, 8}, absl::MakeSpan(late_rows)));
  EXPECT_EQ(Rows(*replica, {7, 8}, "late"), late_rows);
}

TEST_F(ServingTest, FollowsCheckpointsThenPublications) {
  const std::vector<uint64_t> keys = {1, 2, 3};
  Push(keys, 1.0f);
  Checkpoint(10);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  EXPECT_EQ(Version(*replica).step(), 10u);
  EXPECT_EQ(Version(*replica).base_step(), 10u);
  EXPECT_EQ(Rows(*replica, keys), Pull(keys));

  // A hot update: pushed, published, served — by version, not by time.
  Push({2}, 0.5f);
  ASSERT_OK(client_->Publish(11, "").status());
  AwaitStep(*replica, 11);
  EXPECT_EQ(Rows(*replica, keys), Pull(keys));
  EXPECT_GE(Version(*replica).publications_applied(), 1u);

  // A newer checkpoint alone (no publication) is loaded as the new base.
  Push({3}, 2.0f);
  Checkpoint(20);
  AwaitStep(*replica, 20);
  EXPECT_EQ(Version(*replica).base_step(), 20u);
  EXPECT_EQ(Rows(*replica, keys), Pull(keys));
}

// Publication after publication: older overlays are written into the
// base (the chain stays short) while every retained version still answers
// exactly what training held at its step.
TEST_F(ServingTest, PublicationsAreWrittenIntoTheBaseAndVersionsStayExact) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 64; ++k) keys.push_back(k);
  Push(keys, 1.0f);
  Checkpoint(10);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  std::vector<std::vector<float>> at_step;  // training's rows at 11 + i
  for (uint64_t step = 11; step <= 40; ++step) {
    // Some keys again, some new ones (rows the base did not have).
    Push({step % 7 + 1, step % 13 + 20, 100 + step}, 0.25f * step);
    ASSERT_OK(client_->Publish(step, "").status());
    AwaitStep(*replica, step);
    std::vector<uint64_t> all = keys;
    for (uint64_t s = 11; s <= step; ++s) all.push_back(100 + s);
    at_step.push_back(Pull(all));
    proto::LookupRequest request;
    request.set_version(step);
    proto::LookupSlot* slot = request.add_slot();
    slot->set_table("emb");
    slot->set_keys(Pack(all));
    proto::LookupResponse response;
    ASSERT_TRUE(Lookup(*replica, request, &response).ok());
    EXPECT_EQ(Floats(response.values(0)), at_step.back()) << "step " << step;
    // The previous retained step still reads as it was.
    if (step > 11) {
      request.set_version(step - 1);
      std::vector<uint64_t> before = keys;
      for (uint64_t s = 11; s < step; ++s) before.push_back(100 + s);
      request.mutable_slot(0)->set_keys(Pack(before));
      ASSERT_TRUE(Lookup(*replica, request, &response).ok());
      EXPECT_EQ(Floats(response.values(0)), at_step[at_step.size() - 2])
          << "step " << step - 1;
    }
  }
  const proto::ServingVersionResponse version = Version(*replica);
  EXPECT_EQ(version.base_step(), 10u);  // no checkpoint since
  EXPECT_EQ(version.publications_applied(), 30u);
  EXPECT_LE(version.overlays(), 5u) << version.ShortDebugString();
}

TEST_F(ServingTest, PooledLookupsAndUnknownKeysChangeNothing) {
  Push({1, 2}, 1.0f);
  Checkpoint(5);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  const std::vector<float> r1 = Pull({1}), r2 = Pull({2});
  // Key 99 has no row anywhere: its initial vector (emb) or zeros.
  std::vector<float> initial(kDim);
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec spec, SpecFromConfig(Table("emb")));
  embedding::InitialRow(spec.initializer, spec.seed, 99,
                        absl::MakeSpan(initial));
  proto::LookupRequest request;
  for (proto::Pooling pooling :
       {proto::POOLING_NONE, proto::POOLING_SUM, proto::POOLING_MEAN}) {
    proto::LookupSlot* slot = request.add_slot();
    slot->set_table("emb");
    slot->set_keys(Pack({1, 2, 99, 2}));
    slot->set_offsets(PackOffsets({0, 2, 2, 4}));  // bags {1,2}, {}, {99,2}
    slot->set_pooling(pooling);
  }
  proto::LookupSlot* zeros = request.add_slot();
  zeros->set_table("zeros");
  zeros->set_keys(Pack({99}));
  request.set_value_type(proto::FLOAT32);
  proto::LookupResponse response;
  const grpc::Status status = Lookup(*replica, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.values_size(), 4);
  EXPECT_EQ(response.version(), 5u);
  const std::vector<float> none = Floats(response.values(0));
  ASSERT_EQ(none.size(), 4u * kDim);
  EXPECT_EQ(
      std::vector<float>(none.begin() + 2 * kDim, none.begin() + 3 * kDim),
      initial);
  const std::vector<float> sum = Floats(response.values(1));
  const std::vector<float> mean = Floats(response.values(2));
  ASSERT_EQ(sum.size(), 3u * kDim);
  for (int d = 0; d < kDim; ++d) {
    EXPECT_FLOAT_EQ(sum[d], r1[d] + r2[d]);
    EXPECT_EQ(sum[kDim + d], 0.0f);  // the empty bag
    EXPECT_FLOAT_EQ(sum[2 * kDim + d], initial[d] + r2[d]);
    EXPECT_FLOAT_EQ(mean[d], (r1[d] + r2[d]) / 2);
    EXPECT_EQ(mean[kDim + d], 0.0f);
  }
  EXPECT_EQ(Floats(response.values(3)), std::vector<float>(kDim, 0.0f));
  // float16 on the way out.
  request.set_value_type(proto::FLOAT16);
  ASSERT_TRUE(Lookup(*replica, request, &response).ok());
  EXPECT_EQ(response.values(0).size(), 4u * kDim * 2);
  // Nothing was created, on the replica or on training.
  proto::StatsRequest stats_request;
  proto::StatsResponse stats;
  grpc::ClientContext context;
  ASSERT_TRUE(proto::StatsService::NewStub(
                  grpc::CreateChannel(replica->address(),
                                      grpc::InsecureChannelCredentials()))
                  ->Stats(&context, stats_request, &stats)
                  .ok());
  EXPECT_TRUE(stats.serving_replica());
  EXPECT_EQ(stats.serving().step(), 5u);
  EXPECT_GT(stats.resident_bytes(), 0u) << "every role reports its memory";
  for (const auto& table : stats.table()) {
    if (table.name() == "emb") {
      EXPECT_EQ(table.rows(), 2u);
    }
    if (table.name() == "zeros") {
      EXPECT_EQ(table.rows(), 0u);
    }
  }
}

TEST_F(ServingTest, AReplicaRefusesWritesAndBadRequests) {
  Push({1, 2, 3, 4, 5, 6, 7, 8}, 1.0f);
  Checkpoint(3);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica(0, 2));
  const std::vector<float> before = Pull({1});
  // A training client given the replica refuses it before sending
  // anything (it says it is a serving shard).
  client::ClientOptions options;
  options.servers = {replica->address()};
  options.retry.retry_deadline = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(auto writer, client::Client::Connect(options));
  EXPECT_THAT(writer->CreateTable(Table("new")),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("says it is a serving shard 0 of 2")));
  client::TableHandle handle = table_;
  handle.shard_table_ids = {1};
  const std::vector<float> grads(kDim, 1.0f);
  EXPECT_THAT(writer->Push(handle, {{1}}, grads),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("serving shard")));
  // Writes of every kind sent as they are (a client that does not check):
  // the replica refuses them.
  auto training = proto::TrainingService::NewStub(grpc::CreateChannel(
      replica->address(), grpc::InsecureChannelCredentials()));
  const auto refused = [](const grpc::Status& status, const std::string& what) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << what << ": " << status.error_message();
  };
  {
    grpc::ClientContext context;
    proto::CreateTableRequest request;
    *request.mutable_config() = Table("new");
    proto::CreateTableResponse response;
    const grpc::Status status =
        training->CreateTable(&context, request, &response);
    refused(status, "CreateTable");
    EXPECT_THAT(status.error_message(), HasSubstr("serving replica"));
  }
  {
    grpc::ClientContext context;
    proto::PushRequest request;
    request.set_table_id(1);
    proto::PushResponse response;
    const grpc::Status status = training->Push(&context, request, &response);
    refused(status, "Push");
    EXPECT_THAT(status.error_message(), HasSubstr("Push refused"));
  }
  {
    grpc::ClientContext context;
    proto::SaveRequest request;
    request.set_directory(root_ + "/never");
    proto::SaveResponse response;
    refused(training->Save(&context, request, &response), "Save");
  }
  {
    grpc::ClientContext context;
    proto::LoadRequest request;
    request.set_path(root_);
    proto::LoadResponse response;
    const grpc::Status status = training->Load(&context, request, &response);
    refused(status, "Load");
    EXPECT_THAT(status.error_message(), HasSubstr("Load refused"));
  }
  {
    grpc::ClientContext context;
    proto::PublishRequest request;
    request.set_step(4);
    proto::PublishResponse response;
    refused(training->Publish(&context, request, &response), "Publish");
  }
  // The Coordination store lives on training shards: a replica keeps no
  // keys a worker could write.
  {
    auto coordination = proto::Coordination::NewStub(grpc::CreateChannel(
        replica->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    proto::SetRequest request;
    request.set_key("rendezvous/0");
    request.set_value("a worker's address");
    proto::SetResponse response;
    const grpc::Status status = coordination->Set(&context, request, &response);
    refused(status, "Coordination.Set");
    EXPECT_THAT(status.error_message(), HasSubstr("serving replica"));
  }
  // A method path of 4 KB (gRPC takes up to 8 KB of headers): refused,
  // quoting at most a few hundred bytes of it.
  {
    grpc::GenericStub generic(grpc::CreateChannel(
        replica->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::ByteBuffer response;
    const std::string method =
        "/embedps.proto.TrainingService/" + std::string(4000, 'x');
    const grpc::Status status = wire::BulkUnaryCall(
        generic, method, &context, grpc::ByteBuffer(), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status.error_message().substr(0, 300);
    EXPECT_LT(status.error_message().size(), 1000u);
    EXPECT_THAT(status.error_message(), HasSubstr("serving replica"));
  }
  // Bad lookups.
  uint64_t mine = 0, other = 0;
  for (uint64_t k = 1; mine == 0 || other == 0; ++k) {
    (ShardOfKey(k, 2) == 0 ? mine : other) = k;
  }
  struct Case {
    std::string name;
    proto::LookupRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  const auto slot_of = [&](std::vector<uint64_t> keys,
                           std::vector<int32_t> offsets,
                           int pooling = proto::POOLING_SUM) {
    proto::LookupRequest request;
    proto::LookupSlot* slot = request.add_slot();
    slot->set_table("emb");
    slot->set_keys(Pack(keys));
    if (!offsets.empty()) slot->set_offsets(PackOffsets(offsets));
    slot->set_pooling(static_cast<proto::Pooling>(pooling));
    return request;
  };
  cases.push_back({"decreasing offsets", slot_of({mine, mine}, {0, 2, 1}),
                   grpc::StatusCode::INVALID_ARGUMENT, "decrease at bag 1"});
  cases.push_back({"offsets past the keys", slot_of({mine}, {0, 3}),
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "end at 3 but the slot has 1 keys"});
  cases.push_back({"offsets not from 0", slot_of({mine}, {1, 1}),
                   grpc::StatusCode::INVALID_ARGUMENT, "must start at 0"});
  cases.push_back({"unknown pooling", slot_of({mine}, {}, 9),
                   grpc::StatusCode::INVALID_ARGUMENT, "unknown pooling 9"});
  cases.push_back({"key of another shard", slot_of({mine, other}, {}),
                   grpc::StatusCode::FAILED_PRECONDITION,
                   "belongs to serving shard 1"});
  {
    Case c{"unknown table", slot_of({mine}, {}), grpc::StatusCode::NOT_FOUND,
           "no table 'nope'"};
    c.request.mutable_slot(0)->set_table("nope");
    cases.push_back(c);
  }
  {
    Case c{"keys not whole", slot_of({mine}, {}),
           grpc::StatusCode::INVALID_ARGUMENT, "packed little-endian uint64"};
    c.request.mutable_slot(0)->set_keys("abc");
    cases.push_back(c);
  }
  {
    Case c{"a version no longer held", slot_of({mine}, {}),
           grpc::StatusCode::FAILED_PRECONDITION, "version 1 is no longer"};
    c.request.set_version(1);
    cases.push_back(c);
  }
  {
    Case c{"unknown value type", slot_of({mine}, {}),
           grpc::StatusCode::INVALID_ARGUMENT, "unknown value_type"};
    c.request.set_value_type(static_cast<proto::ValueType>(5));
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    proto::LookupResponse response;
    const grpc::Status status = Lookup(*replica, c.request, &response);
    EXPECT_EQ(status.error_code(), c.code)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  // Still serving the same values.
  const std::vector<uint64_t> keys = {mine};
  EXPECT_EQ(Rows(*replica, keys), Pull(keys));
  EXPECT_EQ(Pull({1}), before);
}

TEST_F(ServingTest, ACorruptCheckpointLeavesTheVersionServedAndSaysWhy) {
  Push({1, 2}, 1.0f);
  Checkpoint(4);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  Push({1}, 1.0f);
  const std::string name = WriteCorruptCheckpoint(8);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  proto::ServingVersionResponse version = Version(*replica);
  while (version.last_error().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    version = Version(*replica);
  }
  EXPECT_EQ(version.step(), 4u);
  EXPECT_THAT(version.last_error(), HasSubstr("cannot be loaded"));
  EXPECT_THAT(version.last_error(), HasSubstr(name));
  // Still the step-4 values.
  std::vector<float> row = Rows(*replica, {2});
  EXPECT_EQ(row, Pull({2}));
}

// A replica (re)started while the newest checkpoint is damaged and a newer
// one's MANIFEST is garbage serves the newest checkpoint that loads, and
// names both it passed over.
TEST_F(ServingTest, AReplicaStartedOnBadCheckpointsServesTheNewestGoodOne) {
  Push({1, 2}, 1.0f);
  Checkpoint(4);
  const std::vector<float> at_four = Pull({1, 2});
  Push({1}, 1.0f);
  const std::string damaged = WriteCorruptCheckpoint(8);
  const std::string garbage = ::embedps::checkpoint::CheckpointName(12);
  std::filesystem::create_directories(root_ + "/" + garbage);
  std::ofstream(root_ + "/" + garbage + "/MANIFEST") << "not a manifest";

  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  const proto::ServingVersionResponse version = Version(*replica);
  EXPECT_EQ(version.step(), 4u);
  EXPECT_EQ(Rows(*replica, {1, 2}), at_four);
  ASSERT_EQ(version.bad_checkpoints_size(), 2) << version.ShortDebugString();
  const std::string reports = absl::StrJoin(version.bad_checkpoints(), "\n");
  EXPECT_THAT(reports, HasSubstr(damaged + " cannot be loaded"));
  EXPECT_THAT(reports, HasSubstr(garbage));
  EXPECT_THAT(version.last_error(), HasSubstr("passed over"));

  // Every checkpoint bad: no replica, and the error names them.
  std::filesystem::remove_all(root_ + "/" +
                              ::embedps::checkpoint::CheckpointName(4));
  EXPECT_THAT(StartReplica().status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(damaged)));
}

// A replica keeps values only: an Adagrad table's rows cost it dim floats
// each where training holds twice that (the accumulators), with the same
// values; so do rows of a table it first meets in a publication.
TEST_F(ServingTest, AReplicaHoldsValuesWithoutOptimizerState) {
  proto::TableConfig config = Table("ada");
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  ASSERT_OK_AND_ASSIGN(const client::TableHandle ada,
                       client_->CreateTable(config));
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 100; ++k) keys.push_back(k);
  std::vector<float> grads(keys.size() * kDim, 0.5f);
  ASSERT_OK(client_->Push(ada, keys, grads));
  Checkpoint(3);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  std::vector<float> trained(keys.size() * kDim);
  ASSERT_OK(client_->Lookup(ada, keys, absl::MakeSpan(trained)));
  EXPECT_EQ(Rows(*replica, keys, "ada"), trained);

  config.set_name("ada_later");
  ASSERT_OK_AND_ASSIGN(const client::TableHandle later,
                       client_->CreateTable(config));
  ASSERT_OK(client_->Push(later, keys, grads));
  ASSERT_OK(client_->Publish(4, "").status());
  AwaitStep(*replica, 4);

  const auto payload = [](const std::string& address, const std::string& name) {
    proto::StatsResponse stats;
    grpc::ClientContext context;
    EXPECT_TRUE(
        proto::StatsService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))
            ->Stats(&context, proto::StatsRequest(), &stats)
            .ok());
    for (const auto& table : stats.table()) {
      if (table.name() == name) return table.payload_bytes();
    }
    return uint64_t{0};
  };
  const uint64_t values = keys.size() * kDim * sizeof(float);
  EXPECT_EQ(payload(training_->address(), "ada"), 2 * values);
  EXPECT_EQ(payload(replica->address(), "ada"), values);
  std::vector<float> trained_later(keys.size() * kDim);
  ASSERT_OK(client_->Lookup(later, keys, absl::MakeSpan(trained_later)));
  EXPECT_EQ(Rows(*replica, keys, "ada_later"), trained_later);
}

// `served` equals `trained` row by row (kDim floats) within what `storage`
// keeps: exactly (float32), 2^-11 relative (float16), half a step of
// max|row| / 127 (int8).
void ExpectStoredRows(const std::vector<float>& served,
                      const std::vector<float>& trained,
                      proto::ServingConfig::Storage storage) {
  ASSERT_EQ(served.size(), trained.size());
  for (size_t r = 0; r < trained.size() / kDim; ++r) {
    float max = 0.0f;
    for (int i = 0; i < kDim; ++i) {
      max = std::max(max, std::fabs(trained[r * kDim + i]));
    }
    for (int i = 0; i < kDim; ++i) {
      const float want = trained[r * kDim + i];
      const float got = served[r * kDim + i];
      const float tolerance =
          storage == proto::ServingConfig::FLOAT16 ? std::fabs(want) * 0x1p-11f
          : storage == proto::ServingConfig::INT8  ? max / 254.0f * 1.0001f
                                                   : 0.0f;
      ASSERT_LE(std::fabs(got - want), tolerance)
          << "row " << r << " value " << i << ": served " << got << ", trained "
          << want;
    }
  }
}

// A table stored as float16 or int8 (its serving option, or the replica's
// override) serves its rows within that precision through every way rows
// arrive (a checkpoint, publications written into the base, an incremental
// checkpoint applied in place), unknown and erased keys exactly their
// defaults, and holds the stored bytes only.
TEST_F(ServingTest, RowsStoredAsFloat16OrInt8ServeWithinTheirPrecision) {
  const std::vector<proto::ServingConfig::Storage> storages = {
      proto::ServingConfig::FLOAT16, proto::ServingConfig::INT8};
  std::vector<client::TableHandle> tables;
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 100; ++k) keys.push_back(k);
  std::vector<float> grads(keys.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) {
    grads[i] = 0.01f * static_cast<float>(i % 37) - 0.15f;
  }
  for (proto::ServingConfig::Storage storage : storages) {
    proto::TableConfig config =
        Table(proto::ServingConfig::Storage_Name(storage));
    config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
    config.mutable_serving()->set_storage(storage);
    ASSERT_OK_AND_ASSIGN(tables.emplace_back(), client_->CreateTable(config));
    ASSERT_OK(client_->Push(tables.back(), keys, grads));
  }
  Push(keys, 0.3f);  // "emb", float32, stored as int8 by the second replica
  Checkpoint(3);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  replica_storage_ = proto::ServingConfig::INT8;
  ASSERT_OK_AND_ASSIGN(auto overridden, StartReplica());

  std::vector<uint64_t> all = keys;
  all.push_back(1000);  // never trained: its initial vector
  const auto check = [&](const std::string& when) {
    SCOPED_TRACE(when);
    for (size_t t = 0; t < storages.size(); ++t) {
      std::vector<float> trained(all.size() * kDim);
      ASSERT_OK(client_->Lookup(tables[t], all, absl::MakeSpan(trained)));
      const std::string name = proto::ServingConfig::Storage_Name(storages[t]);
      ExpectStoredRows(Rows(*replica, all, name), trained, storages[t]);
      // The unknown key's initial vector is exact.
      const std::vector<float> served = Rows(*replica, {1000}, name);
      const auto unknown = trained.begin() + keys.size() * kDim;
      EXPECT_EQ(std::vector<float>(served.begin(), served.begin() + kDim),
                std::vector<float>(unknown, unknown + kDim));
    }
    ExpectStoredRows(Rows(*overridden, all), Pull(all),
                     proto::ServingConfig::INT8);
  };
  check("from the checkpoint");

  // Publications, enough of them that their overlays are written into the
  // base (encoded); key 11 erased reads as its initial vector.
  for (uint64_t step = 4; step <= 10; ++step) {
    for (const client::TableHandle& table : tables) {
      ASSERT_OK(client_->Push(table, {1, 2, static_cast<uint64_t>(step + 200)},
                              std::vector<float>(3 * kDim, 0.05f)));
    }
    Push({1, 2}, 0.05f);
    if (step == 6) {
      for (const client::TableHandle& table : tables) {
        ASSERT_OK(client_->Erase(table, {11}).status());
      }
    }
    ASSERT_OK(client_->Publish(step, "").status());
    AwaitStep(*replica, step);
    AwaitStep(*overridden, step);
  }
  all.push_back(205);
  check("after publications");

  // An incremental checkpoint applied in place (a replica that follows
  // checkpoints only).
  ShardOptions serving;
  serving.role = ShardRole::kServing;
  serving.follow.checkpoint_root = root_;
  serving.follow.checkpoint_poll = absl::Milliseconds(50);
  Checkpoint(11);
  ASSERT_OK_AND_ASSIGN(auto checkpoints_only, Shard::Start(serving));
  for (const client::TableHandle& table : tables) {
    ASSERT_OK(client_->Push(table, {3, 300}, std::vector<float>(2 * kDim, 1)));
  }
  Checkpoint(12, /*incremental=*/true);
  AwaitStep(*checkpoints_only, 12);
  EXPECT_GE(Version(*checkpoints_only).increments_applied(), 1u);
  all.push_back(300);
  for (size_t t = 0; t < storages.size(); ++t) {
    std::vector<float> trained(all.size() * kDim);
    ASSERT_OK(client_->Lookup(tables[t], all, absl::MakeSpan(trained)));
    ExpectStoredRows(Rows(*checkpoints_only, all,
                          proto::ServingConfig::Storage_Name(storages[t])),
                     trained, storages[t]);
  }

  // Stored bytes: 4 values of 2 bytes (float16), or a scale and 4 bytes
  // (int8): 8 bytes a row either way, against 16 of float32.
  proto::StatsResponse stats;
  grpc::ClientContext context;
  ASSERT_TRUE(proto::StatsService::NewStub(
                  grpc::CreateChannel(replica->address(),
                                      grpc::InsecureChannelCredentials()))
                  ->Stats(&context, proto::StatsRequest(), &stats)
                  .ok());
  for (const auto& table : stats.table()) {
    if (table.name() == "emb") {
      EXPECT_EQ(table.payload_bytes(), table.rows() * kDim * sizeof(float));
    } else {
      EXPECT_EQ(table.payload_bytes(), table.rows() * 8) << table.name();
    }
  }
}

// An incremental checkpoint whose chain passes through the served base is
// applied in place (its changed and removed rows as one overlay), link
// after link; values equal training's, erased keys are gone.
TEST_F(ServingTest, IncrementalCheckpointsAreAppliedInPlace) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 50; ++k) keys.push_back(k);
  Push(keys, 1.0f);
  Checkpoint(10);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  EXPECT_EQ(Version(*replica).base_step(), 10u);
  // Two increments: the replica may see them one at a time or both.
  Push({1, 2, 60}, 0.5f);
  ASSERT_OK(client_->Erase(table_, {3}).status());
  Checkpoint(20, /*incremental=*/true);
  Push({2, 61}, 0.25f);
  Checkpoint(30, /*incremental=*/true);
  AwaitStep(*replica, 30);
  const proto::ServingVersionResponse version = Version(*replica);
  EXPECT_EQ(version.base_step(), 30u);
  EXPECT_GE(version.increments_applied(), 1u) << version.ShortDebugString();
  std::vector<uint64_t> all = keys;
  all.push_back(60);
  all.push_back(61);
  // Key 3, erased, reads as training's read-only Lookup answers a key
  // without a row (its initial vector), not as the row it had.
  EXPECT_EQ(Rows(*replica, all), Pull(all));
  // A full checkpoint after them is loaded whole (a new base).
  Push({4}, 1.0f);
  Checkpoint(40);
  AwaitStep(*replica, 40);
  EXPECT_EQ(Version(*replica).increments_applied(),
            version.increments_applied());
  EXPECT_EQ(Rows(*replica, all), Pull(all));
}

// A replica that follows publications and checkpoints is never sent again
// what its base already holds: an increment applied in place keeps its
// streams where they are, and a new base subscribes for the publications
// after its step only (the history may hold hundreds of MB).
TEST_F(ServingTest, ANewBaseIsNotSentThePublicationsItHolds) {
  Push({1, 2}, 1.0f);
  Checkpoint(10);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  for (uint64_t step : {11, 12}) {
    Push({1}, 0.5f);
    ASSERT_OK(client_->Publish(step, "").status());
  }
  AwaitStep(*replica, 12);
  Push({2, 3}, 0.25f);
  Checkpoint(20, /*incremental=*/true);
  AwaitStep(*replica, 20);
  EXPECT_EQ(Version(*replica).base_step(), 20u);
  Push({3}, 0.25f);
  ASSERT_OK(client_->Publish(21, "").status());
  AwaitStep(*replica, 21);
  Push({1, 4}, 0.25f);
  Checkpoint(30);
  AwaitStep(*replica, 30);
  Push({4}, 0.25f);
  ASSERT_OK(client_->Publish(31, "").status());
  AwaitStep(*replica, 31);
  const proto::ServingVersionResponse version = Version(*replica);
  EXPECT_EQ(version.base_step(), 30u);
  EXPECT_GE(version.increments_applied(), 1u);
  EXPECT_EQ(version.publications_applied(), 4u);
  EXPECT_EQ(version.publications_passed_over(), 0u);
  EXPECT_EQ(Rows(*replica, {1, 2, 3, 4}), Pull({1, 2, 3, 4}));
}

TEST_F(ServingTest, NoCheckpointMeansNoReplica) {
  EXPECT_THAT(StartReplica().status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ServingTest, APinnedReplicaServesItsStepOnly) {
  Push({1}, 1.0f);
  Checkpoint(2);
  const std::vector<float> at_two = Pull({1});
  Push({1}, 1.0f);
  Checkpoint(6);
  ASSERT_OK(client_->Publish(7, "").status());
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica(0, 1, /*pinned=*/2));
  absl::SleepFor(absl::Milliseconds(200));  // time for a poll to ignore
  EXPECT_EQ(Version(*replica).step(), 2u);
  EXPECT_TRUE(Version(*replica).pinned());
  EXPECT_EQ(Rows(*replica, {1}), at_two);
}

class ServingGapTest : public ServingTest {
 protected:
  ServingGapTest() { history_bytes_ = 1; }  // only the newest publication
};

// A replica whose checkpoint is older than every publication the training
// shard still holds cannot follow the stream without missing rows: it says
// so, keeps serving, and catches up once a new enough checkpoint exists.
TEST_F(ServingGapTest, AGapWaitsForANewerCheckpoint) {
  Push({1}, 1.0f);
  Checkpoint(1);
  Push({2}, 1.0f);
  ASSERT_OK(client_->Publish(2, "").status());
  Push({3}, 1.0f);
  ASSERT_OK(client_->Publish(3, "").status());  // the history keeps only 3
  // A replica from checkpoint 1: publication 3 starts after step 2's
  // publication, which is gone.
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Version(*replica).last_error().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(Version(*replica).last_error(), HasSubstr("are gone"));
  EXPECT_EQ(Version(*replica).step(), 1u);
  Checkpoint(3);
  AwaitStep(*replica, 3);
  Push({1}, 1.0f);
  ASSERT_OK(client_->Publish(4, "").status());
  AwaitStep(*replica, 4);
  const std::vector<uint64_t> keys = {1, 2, 3};
  EXPECT_EQ(Rows(*replica, keys), Pull(keys));
}

// Deletion on request: erased keys leave the training shard at once, the
// serving replica within 5 s (the publication carries the removals: the
// table's unknown-key default is served again), and the next checkpoint;
// a later Pull starts from the initial vector. Refusals change nothing.
TEST_F(ServingTest, ErasedKeysLeaveTrainingServingAndLaterCheckpoints) {
  const std::vector<uint64_t> erased = {11, 12, 13};
  const std::vector<uint64_t> kept = {21, 22};
  const std::vector<float> initial = Pull(erased);  // read-only: no rows
  Push(erased, 1.0f);
  Push(kept, 1.0f);
  std::vector<float> zero_grads(erased.size() * kDim, 1.0f);
  ASSERT_OK(client_->Push(zeros_, erased, zero_grads));
  Checkpoint(1);
  ASSERT_OK_AND_ASSIGN(auto replica, StartReplica());
  AwaitStep(*replica, 1);
  ASSERT_NE(Rows(*replica, erased), initial) << "trained rows are served";
  const std::vector<float> kept_before = Pull(kept);

  ASSERT_OK_AND_ASSIGN(const std::vector<uint64_t> counts,
                       client_->Erase(table_, {13, 11, 12, 11, 999}));
  EXPECT_EQ(counts, std::vector<uint64_t>{3}) << "duplicates once, 999 none";
  ASSERT_OK(client_->Erase(zeros_, erased).status());
  EXPECT_EQ(Pull(erased), initial) << "gone from training at once";
  EXPECT_EQ(Pull(kept), kept_before);

  // Serving: within 5 s of the publication that follows.
  const absl::Time erased_at = absl::Now();
  ASSERT_OK(client_->Publish(2, "").status());
  while (Rows(*replica, erased) != initial &&
         absl::Now() < erased_at + absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(Rows(*replica, erased), initial)
      << "the unknown-key default (the initial vector) within 5 s";
  EXPECT_EQ(Rows(*replica, erased, "zeros"),
            std::vector<float>(erased.size() * kDim, 0.0f))
      << "a ZEROS table's default";
  EXPECT_EQ(Rows(*replica, kept), kept_before);

  // The next checkpoint, restored, does not hold them.
  Checkpoint(2);
  ShardOptions restored_options;
  restored_options.restore = root_ + "/ckpt-000000000002";
  ASSERT_OK_AND_ASSIGN(auto restored, Shard::Start(restored_options));
  client::ClientOptions options;
  options.servers = {restored->address()};
  options.accept_restarted_shards = true;
  ASSERT_OK_AND_ASSIGN(auto reader, client::Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(auto handle, reader->OpenTable("emb"));
  const std::vector<proto::StatsResponse> stats = *reader->Stats();
  for (const auto& table : stats[0].table()) {
    if (table.name() == "emb") {
      EXPECT_EQ(table.rows(), kept.size());
    }
  }
  std::vector<float> rows(erased.size() * kDim);
  ASSERT_OK(reader->Lookup(handle, erased, absl::MakeSpan(rows)));
  EXPECT_EQ(rows, initial);

  // A later Pull starts from the initial vector, and trains from there.
  std::vector<float> pulled(erased.size() * kDim);
  ASSERT_OK(client_->Pull(table_, erased, absl::MakeSpan(pulled)));
  EXPECT_EQ(pulled, initial);

  // Refused, nothing changed: an unknown table, keys not whole uint64s.
  auto stub = proto::TrainingService::NewStub(grpc::CreateChannel(
      training_->address(), grpc::InsecureChannelCredentials()));
  for (const auto& [table_id, keys, code] :
       std::vector<std::tuple<uint32_t, std::string, grpc::StatusCode>>{
           {77, Pack(kept), grpc::StatusCode::NOT_FOUND},
           {table_.shard_table_ids[0], "1234567",
            grpc::StatusCode::INVALID_ARGUMENT},
           {table_.shard_table_ids[0], "",
            grpc::StatusCode::INVALID_ARGUMENT}}) {
    grpc::ClientContext context;
    proto::EraseRequest request;
    request.set_table_id(table_id);
    request.set_keys(keys);
    proto::EraseResponse response;
    EXPECT_EQ(stub->Erase(&context, request, &response).error_code(), code);
  }
  EXPECT_EQ(Pull(kept), kept_before);
}

}  // namespace
}  // namespace embedps::server
