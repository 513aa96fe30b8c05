// Checkpoints and crash recovery with real ps_server processes: full and
// incremental checkpoints restore exactly (a digest of every row), into the
// same number of shards or another; bad checkpoints are refused naming the
// file; a server killed with SIGKILL under push load comes back with
// --restore holding exactly its last complete checkpoint, also when the
// kill lands while a checkpoint is being written.
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/checkpoint.pb.h"
#include "proto/stats.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "testing/child_process.h"
#include "testing/job_output.h"
#include "testing/server_process.h"
#include "testing/shard_digest.h"

namespace embedps {
namespace {

using ::embedps::testing::ChildProcess;
using ::embedps::testing::ServerProcess;
using ::embedps::testing::StatusIs;
using ::embedps::testing::TestTempPath;
using ::testing::HasSubstr;

constexpr char kServer[] = "server/ps_server";
constexpr int kDim = 8;
constexpr char kTable[] = "emb";

// Adagrad rows, kept mostly in the spill tier (a budget of ~300 rows per
// shard), so that checkpoints read both tiers.
proto::TableConfig SpillingTable() {
  proto::TableConfig config;
  config.set_name(kTable);
  config.set_dim(kDim);
  config.set_num_stripes(8);
  config.set_memory_budget_bytes(8 * 40 * 100);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.1f);
  return config;
}

struct ShardDigest {
  uint64_t rows = 0;
  uint64_t digest = 0;
  bool operator==(const ShardDigest& o) const {
    return rows == o.rows && digest == o.digest;
  }
  bool operator!=(const ShardDigest& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const ShardDigest& d) {
  return os << "{rows " << d.rows << ", digest " << d.digest << "}";
}

// A cluster of ps_server processes sharing one data directory root.
class Cluster {
 public:
  // Starts `n` shards; `restore`: passed as --restore. `ports`: reuse these
  // ports (a restart), else port 0.
  // `extra`: more flags for every shard.
  static std::unique_ptr<Cluster> Start(
      int n, const std::string& data_dir, const std::string& restore = "",
      const std::vector<std::string>& extra = {}) {
    auto cluster = std::make_unique<Cluster>();
    cluster->data_dir_ = data_dir;
    cluster->restore_ = restore;
    for (int i = 0; i < n; ++i) {
      auto server = StartShard(i, n, data_dir, restore, 0, extra);
      EXPECT_OK(server.status());
      if (!server.ok()) return nullptr;
      cluster->addresses_.push_back((*server)->address());
      cluster->servers_.push_back(std::move(*server));
    }
    return cluster;
  }

  static absl::StatusOr<std::unique_ptr<ServerProcess>> StartShard(
      int i, int n, const std::string& data_dir, const std::string& restore,
      int port, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {absl::StrCat("--shard_index=", i),
                                     absl::StrCat("--num_shards=", n),
                                     "--data_dir=" + data_dir};
    args.insert(args.end(), extra.begin(), extra.end());
    if (port != 0) args.push_back(absl::StrCat("--port=", port));
    if (!restore.empty()) args.push_back("--restore=" + restore);
    return ServerProcess::Start(kServer, args);
  }

  // Kills shard `i` with SIGKILL and waits for it to die.
  void Kill(int i) {
    servers_[i]->Signal(SIGKILL);
    EXPECT_EQ(servers_[i]->Wait(), 128 + SIGKILL);
  }

  // Restarts shard `i` on its old port with --restore=`restore`.
  void Restart(int i, const std::string& restore) {
    const std::string& address = addresses_[i];
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    auto server = StartShard(i, static_cast<int>(servers_.size()), data_dir_,
                             restore, port);
    ASSERT_OK(server.status());
    servers_[i] = std::move(*server);
  }

  std::unique_ptr<client::Client> Connect(
      absl::Duration retry_deadline = absl::Seconds(10),
      bool accept_restarted_shards = false) const {
    client::ClientOptions options;
    options.servers = addresses_;
    options.retry.retry_deadline = retry_deadline;
    options.accept_restarted_shards = accept_restarted_shards;
    auto client = client::Client::Connect(options);
    EXPECT_OK(client.status());
    return std::move(client).value();
  }

  // Rows and content digest of the table on every shard (no writer may
  // run meanwhile).
  std::vector<ShardDigest> Digests() const {
    std::vector<ShardDigest> digests;
    for (const std::string& address : addresses_) {
      absl::StatusOr<proto::StatsResponse> response =
          testing::StatsWithDigests(address);
      EXPECT_OK(response.status());
      ShardDigest d;
      if (!response.ok()) {
        digests.push_back(d);
        continue;
      }
      for (const auto& table : response->table()) {
        if (table.name() != kTable) continue;
        d.rows = table.rows();
        d.digest = table.content_digest();
      }
      digests.push_back(d);
    }
    return digests;
  }

  const std::vector<std::string>& addresses() const { return addresses_; }
  ServerProcess& server(int i) { return *servers_[i]; }

 private:
  std::string data_dir_, restore_;
  std::vector<std::unique_ptr<ServerProcess>> servers_;
  std::vector<std::string> addresses_;
};

ShardDigest Total(const std::vector<ShardDigest>& shards) {
  ShardDigest total;
  for (const ShardDigest& d : shards) {
    total.rows += d.rows;
    total.digest += d.digest;
  }
  return total;
}

// Pushes `rounds` batches of random gradients for keys in [0, key_space).
void PushRandom(client::Client& client, const client::TableHandle& table,
                int rounds, uint64_t key_space, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<uint64_t> key_of(0, key_space - 1);
  std::normal_distribution<float> grad_of(0.0f, 1.0f);
  for (int r = 0; r < rounds; ++r) {
    std::vector<uint64_t> keys(2000);
    for (uint64_t& k : keys) k = key_of(rng) * 2654435761u;
    std::vector<float> grads(keys.size() * kDim);
    for (float& g : grads) g = grad_of(rng);
    ASSERT_OK(client.Push(table, keys, grads));
  }
}

// Starts shard 0 of 2 with --restore=`path`; returns its exit code and
// stderr (a server that cannot restore exits 1 before serving).
std::pair<int, std::string> FailedRestore(const std::string& path) {
  const std::string err = TestTempPath("restore_stderr");
  auto process =
      ChildProcess::Spawn(kServer,
                          {"--host=127.0.0.1", "--port=0", "--shard_index=0",
                           "--num_shards=2", "--restore=" + path},
                          "", err);
  EXPECT_OK(process.status());
  if (!process.ok()) return {-1, ""};
  const int code = (*process)->Wait();
  return {code, testing::ReadFile(err)};
}

TEST(CheckpointTest, FullAndIncrementalRestoreExactlyIntoAnyShardCount) {
  const std::string data = TestTempPath("data");
  const std::string root = TestTempPath("checkpoints");
  std::filesystem::create_directories(root);
  auto two = Cluster::Start(2, data + "/a");
  ASSERT_NE(two, nullptr);
  auto client = two->Connect();
  ASSERT_OK_AND_ASSIGN(const client::TableHandle table,
                       client->CreateTable(SpillingTable()));
  PushRandom(*client, table, 10, 20000, 1);

  ASSERT_OK_AND_ASSIGN(const proto::CheckpointManifest full,
                       client->Checkpoint({root, 100, false}));
  EXPECT_EQ(full.name(), "ckpt-000000000100");
  EXPECT_EQ(full.parent(), "");
  const ShardDigest at_full = Total(two->Digests());
  ASSERT_GT(at_full.rows, 10000u);
  // The spill tier was in use.
  ASSERT_OK_AND_ASSIGN(auto stats, client->Stats());
  EXPECT_GT(stats[0].table(0).spilled_rows(),
            stats[0].table(0).resident_rows());

  PushRandom(*client, table, 3, 30000, 2);  // changes and new rows
  ASSERT_OK_AND_ASSIGN(const proto::CheckpointManifest increment,
                       client->Checkpoint({root, 200, true}));
  EXPECT_EQ(increment.parent(), "ckpt-000000000100");
  uint64_t increment_rows = 0;
  for (const auto& file : increment.table(0).file()) {
    EXPECT_TRUE(file.incremental());
    increment_rows += file.rows();
  }
  const ShardDigest at_increment = Total(two->Digests());
  EXPECT_LT(increment_rows, at_increment.rows) << "only changed rows";
  EXPECT_GT(increment_rows, 0u);
  EXPECT_NE(at_increment, at_full);
  two.reset();  // SIGTERM both

  // 2 -> 3 shards, the latest checkpoint (full + increment).
  auto three = Cluster::Start(3, data + "/b", root);
  ASSERT_NE(three, nullptr);
  EXPECT_EQ(Total(three->Digests()), at_increment);
  for (const ShardDigest& shard : three->Digests()) EXPECT_GT(shard.rows, 0u);
  // 3 -> 2 shards: checkpoint the 3-shard cluster, restore into 2.
  const std::string root3 = TestTempPath("checkpoints3");
  std::filesystem::create_directories(root3);
  ASSERT_OK(three->Connect()->Checkpoint({root3, 200, false}).status());
  three.reset();
  auto back = Cluster::Start(2, data + "/c", root3);
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(Total(back->Digests()), at_increment);
  back.reset();
  // A named older checkpoint restores as it was.
  auto older = Cluster::Start(2, data + "/d", root + "/ckpt-000000000100");
  ASSERT_NE(older, nullptr);
  EXPECT_EQ(Total(older->Digests()), at_full);
  older.reset();
  // An increment whose parent is gone is refused, naming both.
  std::filesystem::remove_all(root + "/ckpt-000000000100");
  const auto [code, err] = FailedRestore(root);
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err, HasSubstr("ckpt-000000000200' builds on"));
  EXPECT_THAT(err, HasSubstr("ckpt-000000000100"));
}

TEST(CheckpointTest, BadCheckpointsAndRequestsAreRefusedClearly) {
  const std::string data = TestTempPath("data");
  const std::string root = TestTempPath("checkpoints");
  std::filesystem::create_directories(root);
  auto cluster = Cluster::Start(2, data + "/a");
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Connect(absl::Seconds(2));
  ASSERT_OK_AND_ASSIGN(const client::TableHandle table,
                       client->CreateTable(SpillingTable()));
  PushRandom(*client, table, 3, 10000, 3);
  ASSERT_OK(client->Checkpoint({root, 1, false}).status());
  const ShardDigest first = Total(cluster->Digests());
  PushRandom(*client, table, 3, 10000, 4);
  ASSERT_OK(client->Checkpoint({root, 2, false}).status());
  EXPECT_THAT(client->Checkpoint({root, 2, false}).status(),
              StatusIs(absl::StatusCode::kAlreadyExists));

  // Bad requests: the shard says what is wrong and nothing changes.
  auto stub = proto::TrainingService::NewStub(grpc::CreateChannel(
      cluster->addresses()[0], grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    proto::SaveRequest request;
    request.set_directory(root + "/does/not/exist");
    request.set_name("x");
    proto::SaveResponse response;
    const grpc::Status status = stub->Save(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("does/not/exist"));
  }
  {
    grpc::ClientContext context;
    proto::SaveRequest request;
    request.set_directory(root);
    request.set_name("../escape");
    proto::SaveResponse response;
    EXPECT_EQ(stub->Save(&context, request, &response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    proto::AwaitSaveRequest request;
    request.set_name("never-started");
    proto::AwaitSaveResponse response;
    EXPECT_EQ(stub->AwaitSave(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // Load into a shard whose table has rows.
  EXPECT_THAT(client->Load(root).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("already has rows")));
  const ShardDigest second = Total(cluster->Digests());
  cluster.reset();

  const std::string latest = root + "/ckpt-000000000002";
  // A flipped byte in a table file.
  const std::string flipped_root = TestTempPath("flipped");
  std::filesystem::copy(root, flipped_root,
                        std::filesystem::copy_options::recursive);
  const std::string file =
      flipped_root + "/ckpt-000000000002/shard-00000-of-00002/t-emb.sst";
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7e');
  }
  auto [code, err] = FailedRestore(flipped_root);
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err, HasSubstr(file));
  EXPECT_THAT(err, HasSubstr("corrupt"));
  // A truncated manifest.
  const std::string cut_root = TestTempPath("cut");
  std::filesystem::copy(root, cut_root,
                        std::filesystem::copy_options::recursive);
  const std::string manifest = cut_root + "/ckpt-000000000002/MANIFEST";
  std::filesystem::resize_file(manifest,
                               std::filesystem::file_size(manifest) / 2);
  // Named, it is refused with the file at fault...
  std::tie(code, err) = FailedRestore(cut_root + "/ckpt-000000000002");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err, HasSubstr(manifest));
  // ... and the root's search leaves it out (a checkpoint whose manifest
  // does not check is not complete) and takes the previous one.
  auto previous = Cluster::Start(2, data + "/b", cut_root);
  ASSERT_NE(previous, nullptr);
  EXPECT_EQ(Total(previous->Digests()), first);
  previous.reset();
  // Directories not of the checkpoints' own form are never taken, whatever
  // they hold or however they sort: an operator's copy and quarantine.
  const std::string named_root = TestTempPath("named");
  std::filesystem::copy(root, named_root,
                        std::filesystem::copy_options::recursive);
  std::filesystem::rename(named_root + "/ckpt-000000000002",
                          named_root + "/ckpt-000000000002.bad");
  std::filesystem::copy(named_root + "/ckpt-000000000001",
                        named_root + "/ckpt-zz-backup-of-first",
                        std::filesystem::copy_options::recursive);
  auto by_manifest = Cluster::Start(2, data + "/d", named_root);
  ASSERT_NE(by_manifest, nullptr);
  EXPECT_EQ(by_manifest->server(0).address().empty(), false);
  EXPECT_EQ(Total(by_manifest->Digests()), first);
  by_manifest.reset();

  // A Save into a complete checkpoint is refused and writes nothing.
  {
    // Shards whose --checkpoint_root is `root` alone.
    std::filesystem::create_directories(data + "/e");
    auto cluster =
        Cluster::Start(2, data + "/e", "", {"--checkpoint_root=" + root});
    ASSERT_NE(cluster, nullptr);
    auto stub = proto::TrainingService::NewStub(grpc::CreateChannel(
        cluster->addresses()[0], grpc::InsecureChannelCredentials()));
    const std::string table_file = latest + "/shard-00000-of-00002/t-emb.sst";
    const auto size_before = std::filesystem::file_size(table_file);
    const auto time_before = std::filesystem::last_write_time(table_file);
    grpc::ClientContext context;
    proto::SaveRequest request;
    request.set_directory(latest);
    request.set_name("ckpt-000000000002");
    request.set_step(2);
    proto::SaveResponse response;
    const grpc::Status status = stub->Save(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_EQ(std::filesystem::file_size(table_file), size_before);
    EXPECT_EQ(std::filesystem::last_write_time(table_file), time_before);
    // A megabyte of path: refused, its message a bounded quote of it.
    grpc::ClientContext long_context;
    request.set_directory(std::string(1 << 20, 'p'));
    const grpc::Status long_status =
        stub->Save(&long_context, request, &response);
    EXPECT_EQ(long_status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << long_status.error_message().substr(0, 200);
    EXPECT_LE(long_status.error_message().size(), 1100u);
    EXPECT_THAT(long_status.error_message(), HasSubstr("bytes left out"));
    // A checkpoint the shards refuse (outside their --checkpoint_root)
    // leaves nothing where the client was pointed.
    auto client = cluster->Connect(absl::Seconds(2));
    const std::string elsewhere = TestTempPath("elsewhere");  // not in root
    std::filesystem::create_directories(elsewhere);
    EXPECT_THAT(client->Checkpoint({elsewhere, 5, false}).status(),
                StatusIs(absl::StatusCode::kPermissionDenied));
    EXPECT_TRUE(std::filesystem::is_empty(elsewhere));
    // A root that is a file: a permanent error, not one to retry.
    const std::string not_a_directory = TestTempPath("a_file");
    std::ofstream(not_a_directory) << "x";
    EXPECT_THAT(client->Checkpoint({not_a_directory, 5, false}).status(),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr("Not a directory")));
  }

  // A half-written checkpoint (no manifest, still .tmp) does not exist.
  std::filesystem::create_directories(
      root + "/ckpt-000000000003.tmp/shard-00000-of-00002");
  std::ofstream(root + "/ckpt-000000000003.tmp/shard-00000-of-00002/t-emb.sst")
      << "half";
  auto restored = Cluster::Start(2, data + "/c", root);
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(Total(restored->Digests()), second);
  (void)latest;
}

// Pushers and a checkpointer run against 2 shards; shard 1 is killed with
// SIGKILL, restarted with --restore, and must hold exactly its part of the
// last complete checkpoint. Twice: at a random moment, and right after a
// checkpoint's snapshots were taken (its files being written, its manifest
// not yet).
TEST(CheckpointTest, KilledServerRestartsFromItsLastCompleteCheckpoint) {
  const std::string data = TestTempPath("data");
  const std::string root = TestTempPath("checkpoints");
  std::filesystem::create_directories(root);
  auto cluster = Cluster::Start(2, data);
  ASSERT_NE(cluster, nullptr);
  ASSERT_OK_AND_ASSIGN(const client::TableHandle table,
                       cluster->Connect()->CreateTable(SpillingTable()));

  // Pushers hold `gate` shared around each Push; the checkpointer holds it
  // exclusively while it reads digests and takes snapshots, so each
  // checkpoint's digests are exactly its contents.
  std::shared_mutex gate;
  std::atomic<bool> pushing{true};
  std::atomic<uint64_t> pushes{0}, push_errors{0}, unavailable{0};
  std::vector<std::unique_ptr<client::Client>> pusher_clients;
  // They know the shard they push to may come back from a checkpoint.
  for (int p = 0; p < 2; ++p) {
    pusher_clients.push_back(
        cluster->Connect(absl::Seconds(2), /*accept_restarted_shards=*/true));
  }
  const auto pusher = [&](int p, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<uint64_t> key_of(0, 49999);
    std::normal_distribution<float> grad_of(0.0f, 1.0f);
    std::vector<uint64_t> keys(1000);
    std::vector<float> grads(keys.size() * kDim);
    while (pushing.load()) {
      for (uint64_t& k : keys) k = key_of(rng) * 2654435761u;
      for (float& g : grads) g = grad_of(rng);
      std::shared_lock<std::shared_mutex> lock(gate);
      const absl::Status status = pusher_clients[p]->Push(table, keys, grads);
      if (status.ok()) {
        ++pushes;
      } else {
        ++push_errors;
        if (status.code() == absl::StatusCode::kUnavailable) ++unavailable;
        absl::SleepFor(absl::Milliseconds(20));
      }
    }
  };

  struct Complete {
    std::string name;
    std::vector<ShardDigest> digests;
  };
  std::vector<Complete> complete;
  auto checkpoint_client = cluster->Connect(absl::Seconds(2));
  uint64_t step = 0;
  // One checkpoint; returns the pending one when `finish` is false.
  const auto checkpoint =
      [&](bool finish) -> std::unique_ptr<client::Client::PendingCheckpoint> {
    std::vector<ShardDigest> digests;
    absl::StatusOr<std::unique_ptr<client::Client::PendingCheckpoint>> pending;
    {
      std::unique_lock<std::shared_mutex> lock(gate);
      digests = cluster->Digests();
      pending = checkpoint_client->StartCheckpoint({root, ++step, true});
    }
    if (!pending.ok()) return nullptr;
    if (!finish) return std::move(*pending);
    if ((*pending)->Finish().ok()) {
      complete.push_back({(*pending)->name(), digests});
    }
    return nullptr;
  };

  const unsigned seed = std::random_device{}();
  std::printf("kill timing seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 2; ++round) {
    const bool during_write = round == 1;
    pushing = true;
    std::thread a(pusher, 0, 100 + round), b(pusher, 1, 200 + round);
    const size_t complete_before = complete.size();
    // A few complete checkpoints under load.
    while (complete.size() < complete_before + 3) {
      absl::SleepFor(absl::Milliseconds(100));
      checkpoint(true);
    }
    std::unique_ptr<client::Client::PendingCheckpoint> in_flight;
    if (during_write) {
      in_flight = checkpoint(false);
      ASSERT_NE(in_flight, nullptr);
    } else {
      absl::SleepFor(
          absl::Milliseconds(std::uniform_int_distribution<int>(0, 400)(rng)));
    }
    // A client that does not accept restarts, which has talked to shard 1.
    auto watcher = cluster->Connect(absl::Seconds(2));
    std::vector<uint64_t> watched(64);
    std::iota(watched.begin(), watched.end(), 1);
    std::vector<float> watched_rows(watched.size() * kDim);
    // (EXPECT: the pushers are running; an ASSERT would leave them.)
    EXPECT_OK(watcher->Lookup(table, watched, absl::MakeSpan(watched_rows)));
    cluster->Kill(1);
    if (in_flight != nullptr) {
      EXPECT_THAT(in_flight->Finish().status(),
                  StatusIs(absl::StatusCode::kUnavailable));
      EXPECT_FALSE(std::filesystem::exists(in_flight->directory()))
          << "an unfinished checkpoint leaves nothing behind";
    }
    // Pushers now fail with UNAVAILABLE (after their 2 s of retries).
    const uint64_t unavailable_before = unavailable.load();
    const absl::Time wait_until = absl::Now() + absl::Seconds(10);
    while (unavailable.load() == unavailable_before &&
           absl::Now() < wait_until) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    EXPECT_GT(unavailable.load(), unavailable_before);
    pushing = false;
    a.join();
    b.join();

    cluster->Restart(1, root);
    ASSERT_FALSE(complete.empty());
    EXPECT_EQ(cluster->Digests()[1], complete.back().digests[1])
        << "round " << round << ": shard 1 after restoring "
        << complete.back().name;

    // The watcher is told, and touches nothing on shard 1.
    EXPECT_THAT(
        watcher->Lookup(table, watched, absl::MakeSpan(watched_rows)),
        StatusIs(absl::StatusCode::kAborted,
                 HasSubstr(absl::StrCat("shard 1 (", cluster->addresses()[1],
                                        ") is a new server process"))));
    EXPECT_EQ(cluster->Digests()[1], complete.back().digests[1]);

    // The clients that accept it continue against the restarted shard.
    pushing = true;
    const uint64_t pushes_before = pushes.load();
    std::thread c(pusher, 0, 300 + round);
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (pushes.load() < pushes_before + 5 && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    pushing = false;
    c.join();
    EXPECT_GT(pushes.load(), pushes_before);
  }
  std::printf("pushes %lu, failed %lu (UNAVAILABLE %lu), checkpoints %zu\n",
              static_cast<unsigned long>(pushes.load()),
              static_cast<unsigned long>(push_errors.load()),
              static_cast<unsigned long>(unavailable.load()), complete.size());
}

// A Load whose checkpoint has one corrupt table file (the second table's,
// on shard 1) fails with DATA_LOSS naming it and leaves every real server
// as it was — no table restored on either shard, not even the first —; the
// same Load with the file intact then succeeds on those servers.
TEST(CheckpointTest, AFailedLoadLeavesEveryShardAsItWas) {
  const std::string root = TestTempPath("all_or_nothing");
  std::filesystem::create_directories(root);
  proto::TableConfig first = SpillingTable();
  proto::TableConfig second = SpillingTable();
  second.set_name("second");
  ShardDigest saved;
  {
    auto cluster = Cluster::Start(2, TestTempPath("data_saved"));
    ASSERT_NE(cluster, nullptr);
    auto client = cluster->Connect(absl::Seconds(2));
    ASSERT_OK_AND_ASSIGN(auto a, client->CreateTable(first));
    ASSERT_OK_AND_ASSIGN(auto b, client->CreateTable(second));
    PushRandom(*client, a, 2, 10000, 5);
    PushRandom(*client, b, 2, 10000, 6);
    ASSERT_OK(client->Checkpoint({root, 3, false}).status());
    saved = Total(cluster->Digests());
  }
  const std::string file =
      root + "/ckpt-000000000003/shard-00001-of-00002/t-second.sst";
  const std::string intact = TestTempPath("intact.sst");
  std::filesystem::copy_file(file, intact);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(file) / 2));
    f.put('\x5a');
  }

  auto cluster = Cluster::Start(2, TestTempPath("data_load"));
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Connect(absl::Seconds(2));
  // A table the job created before loading: it must keep its id.
  ASSERT_OK_AND_ASSIGN(const client::TableHandle before,
                       client->CreateTable(first));
  EXPECT_THAT(client->Load(root).status(),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("t-second.sst")));
  for (int shard = 0; shard < 2; ++shard) {
    ASSERT_OK_AND_ASSIGN(
        const proto::StatsResponse stats,
        testing::StatsWithDigests(cluster->addresses()[shard]));
    ASSERT_EQ(stats.table_size(), 1) << "shard " << shard << ": only the "
                                     << "table created before";
    EXPECT_EQ(stats.table(0).rows(), 0u) << "shard " << shard;
  }

  std::filesystem::copy_file(intact, file,
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_OK_AND_ASSIGN(const proto::LoadResponse loaded, client->Load(root));
  EXPECT_EQ(loaded.step(), 3u);
  EXPECT_EQ(Total(cluster->Digests()), saved);
  // Restored under the id the job holds.
  std::vector<float> rows(kDim);
  EXPECT_OK(client->Pull(before, {uint64_t{42}}, absl::MakeSpan(rows)));
}

}  // namespace
}  // namespace embedps
