// Replicated shards with real processes: two replicas per shard whose
// primary is chosen by the control plane — a coordinator (the replica
// directory), or a 3-member etcd cluster — killed with SIGKILL under load,
// or cut off from the control plane; docs/architecture.md "Replication".
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/serving_client.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "control/etcd_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/replication.grpc.pb.h"
#include "proto/stats.grpc.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "server/etcd_directory_client.h"
#include "testing/etcd_cluster.h"
#include "testing/server_process.h"
#include "wire/server_identity.h"

namespace embedps {
namespace {

using ::embedps::testing::EtcdCluster;
using ::embedps::testing::ServerProcess;

enum class ControlPlane { kCoordinator, kEtcd };

constexpr char kServer[] = "server/ps_server";
constexpr int kDim = 8;
constexpr int kShards = 2;
constexpr int kReplicas = 2;
constexpr uint64_t kKeys = 2000;

proto::TableConfig SgdTable() {
  proto::TableConfig config;
  config.set_name("t");
  config.set_dim(kDim);
  config.mutable_initializer()->set_kind(proto::InitializerConfig::ZEROS);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

class ReplicationTest : public ::testing::TestWithParam<ControlPlane> {
 protected:
  void SetUp() override {
    ASSERT_OK(StartControlPlane());
    for (int shard = 0; shard < kShards; ++shard) {
      for (int r = 0; r < kReplicas; ++r) {
        ASSERT_OK_AND_ASSIGN(auto replica, StartReplica(shard, r));
        ports_[shard][r] =
            replica->address().substr(replica->address().rfind(':') + 1);
        replicas_[shard][r] = std::move(replica);
      }
    }
    for (int shard = 0; shard < kShards; ++shard) {
      ASSERT_TRUE(AllInSync(shard, absl::Seconds(30))) << "shard " << shard;
    }
  }

  bool etcd() const { return GetParam() == ControlPlane::kEtcd; }

  // A new coordinator, or a new 3-member etcd cluster.
  absl::Status StartControlPlane() {
    coordinator_.reset();
    etcd_directory_.reset();
    etcd_cluster_.reset();
    if (etcd()) {
      absl::StatusOr<std::unique_ptr<EtcdCluster>> cluster =
          EtcdCluster::Start(3);
      if (!cluster.ok()) return cluster.status();
      etcd_cluster_ = *std::move(cluster);
      control::EtcdOptions options;
      options.endpoints = etcd_cluster_->endpoints();
      absl::StatusOr<std::unique_ptr<control::EtcdClient>> client =
          control::EtcdClient::Create(options);
      if (!client.ok()) return client.status();
      etcd_directory_ = std::make_unique<server::EtcdDirectoryClient>(
          *std::move(client), server::EtcdDirectoryOptions{});
      return absl::OkStatus();
    }
    absl::StatusOr<std::unique_ptr<ServerProcess>> coordinator =
        ServerProcess::Start(kServer,
                             {"--role=coordinator", "--replica_lease=1s"});
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = *std::move(coordinator);
    directory_ = proto::ReplicaDirectory::NewStub(grpc::CreateChannel(
        coordinator_->address(), grpc::InsecureChannelCredentials()));
    return absl::OkStatus();
  }

  // The flag that names the control plane to a replica.
  std::string ControlPlaneFlag() const {
    return etcd() ? "--control_plane=" + etcd_cluster_->endpoints()
                  : "--replica_directory=" + coordinator_->address();
  }

  absl::StatusOr<std::unique_ptr<ServerProcess>> StartReplica(int shard,
                                                              int replica) {
    std::vector<std::string> args = {absl::StrCat("--shard_index=", shard),
                                     absl::StrCat("--num_shards=", kShards),
                                     ControlPlaneFlag(), "--forward_timeout=1s",
                                     "--num_workers=2"};
    if (!ports_[shard][replica].empty()) {
      args.push_back("--port=" + ports_[shard][replica]);
    }
    return ServerProcess::Start(kServer, args);
  }

  // Which replica of `view`'s shard is its primary (0 or 1).
  int PrimaryIndex(const proto::ReplicaView& view, int shard) {
    return view.primary() == Address(shard, 0) ? 0 : 1;
  }

  std::string Address(int shard, int replica) {
    return "127.0.0.1:" + ports_[shard][replica];
  }

  std::vector<std::string> Servers() {
    std::vector<std::string> servers;
    for (int shard = 0; shard < kShards; ++shard) {
      servers.push_back(
          absl::StrCat(Address(shard, 0), "|", Address(shard, 1)));
    }
    return servers;
  }

  absl::StatusOr<proto::ReplicaView> View(int shard) {
    if (etcd()) return etcd_directory_->View(shard);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    proto::ReplicaViewRequest request;
    request.set_shard(shard);
    proto::ReplicaView view;
    const grpc::Status status = directory_->View(&context, request, &view);
    if (!status.ok()) return absl::UnavailableError(status.error_message());
    return view;
  }

  // Waits until every replica of `shard` is in sync.
  bool AllInSync(int shard, absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      absl::StatusOr<proto::ReplicaView> view = View(shard);
      if (view.ok() && view->in_sync_size() == kReplicas) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  // Content digests of every replica of `shard` (Stats is answered by
  // backups too).
  std::vector<uint64_t> Digests(int shard) {
    std::vector<uint64_t> digests;
    for (int r = 0; r < kReplicas; ++r) {
      auto stub = proto::StatsService::NewStub(grpc::CreateChannel(
          Address(shard, r), grpc::InsecureChannelCredentials()));
      grpc::ClientContext context;
      proto::StatsRequest request;
      request.set_content_digest(true);
      proto::StatsResponse response;
      EXPECT_TRUE(stub->Stats(&context, request, &response).ok());
      digests.push_back(
          response.table_size() == 1 ? response.table(0).content_digest() : 0);
    }
    return digests;
  }

  std::unique_ptr<ServerProcess> coordinator_;
  std::unique_ptr<proto::ReplicaDirectory::Stub> directory_;
  std::unique_ptr<EtcdCluster> etcd_cluster_;
  std::unique_ptr<server::EtcdDirectoryClient> etcd_directory_;
  std::unique_ptr<ServerProcess> replicas_[kShards][kReplicas];
  std::string ports_[kShards][kReplicas];
};

// 16 keys that shard 0 holds.
std::vector<uint64_t> KeysOfShard0() {
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; keys.size() < 16; ++k) {
    if (ShardOfKey(k, kShards) == 0) keys.push_back(k);
  }
  return keys;
}

std::unique_ptr<client::Client> Connect(std::vector<std::string> servers) {
  client::ClientOptions options;
  options.servers = std::move(servers);
  options.retry.retry_deadline = absl::Seconds(60);
  // A hung replica costs an attempt's deadline before the next is tried.
  options.retry.rpc_timeout = absl::Seconds(3);
  auto connected = client::Client::Connect(options);
  EXPECT_OK(connected);
  return connected.ok() ? *std::move(connected) : nullptr;
}

// The set-up most tests share: a client of every shard with the SGD table
// created, shard 0's keys, and gradients of one for them.
struct Writer {
  std::unique_ptr<client::Client> client;
  client::TableHandle table;
  std::vector<uint64_t> keys = KeysOfShard0();
  std::vector<float> grads = std::vector<float>(keys.size() * kDim, 1.0f);
};

absl::StatusOr<Writer> ConnectWriter(std::vector<std::string> servers) {
  Writer writer;
  writer.client = Connect(std::move(servers));
  if (writer.client == nullptr) {
    return absl::UnavailableError("no client of the shards");
  }
  absl::StatusOr<client::TableHandle> table =
      writer.client->CreateTable(SgdTable());
  if (!table.ok()) return table.status();
  writer.table = *table;
  return writer;
}

// 20 rounds of SIGKILL of a random replica (primary or backup) at a random
// time while two clients push known gradients; every killed replica is
// restarted and catches up. Gradients are small integers and the optimizer
// is SGD with rate 1, so a row's value is exactly minus the sum of the
// gradients applied to it, in any order: the tables must equal the sum of
// exactly the acknowledged pushes (none lost, none applied twice), and the
// replicas of a shard must hold identical bytes.
TEST_P(ReplicationTest, NoAcknowledgedPushIsLostOrDoubledAcrossKills) {
  auto setup = Connect(Servers());
  ASSERT_NE(setup, nullptr);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       setup->CreateTable(SgdTable()));
  constexpr int kClients = 2;
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> expected(kClients,
                                            std::vector<double>(kKeys, 0));
  std::atomic<int> acked{0};
  std::vector<std::string> errors(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      auto client = Connect(Servers());
      if (client == nullptr) return;
      std::mt19937_64 rng(c + 1);
      std::vector<uint64_t> keys(64);
      std::vector<float> grads(keys.size() * kDim);
      while (!stop.load()) {
        std::set<uint64_t> distinct;
        while (distinct.size() < keys.size()) distinct.insert(rng() % kKeys);
        keys.assign(distinct.begin(), distinct.end());
        const float g = static_cast<float>(1 + rng() % 3);
        std::fill(grads.begin(), grads.end(), g);
        const absl::Status pushed = client->Push(table, keys, grads);
        if (!pushed.ok()) {
          errors[c] = std::string(pushed.message());
          return;
        }
        for (uint64_t k : keys) expected[c][k] += g;
        acked.fetch_add(1);
      }
    });
  }
  std::mt19937_64 rng(42);
  std::vector<double> failover_seconds, in_sync_seconds;
  for (int round = 0; round < 20; ++round) {
    // Over etcd, one of its three members is down for rounds 5 to 11:
    // with a quorum left, nothing changes.
    if (etcd() && round == 5) etcd_cluster_->Kill(0);
    if (etcd() && round == 12) {
      ASSERT_OK(etcd_cluster_->Restart(0));
    }
    absl::SleepFor(absl::Milliseconds(200 + rng() % 600));
    const int shard = static_cast<int>(rng() % kShards);
    const int r = static_cast<int>(rng() % kReplicas);
    ASSERT_OK_AND_ASSIGN(const proto::ReplicaView before, View(shard));
    const bool was_primary = before.primary() == Address(shard, r);
    const int acked_before = acked.load();
    const absl::Time killed = absl::Now();
    replicas_[shard][r]->Signal(SIGKILL);
    replicas_[shard][r]->Wait();
    replicas_[shard][r].reset();
    // Writes go on once a primary is back (at once when a backup died).
    while (acked.load() < acked_before + 10 &&
           absl::Now() - killed < absl::Seconds(30)) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    failover_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - killed));
    ASSERT_OK_AND_ASSIGN(replicas_[shard][r], StartReplica(shard, r));
    ASSERT_TRUE(AllInSync(shard, absl::Seconds(30)))
        << "round " << round << ": the restarted replica did not catch up";
    in_sync_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - killed));
    std::printf(
        "round %d: killed shard %d replica %d (%s): writes again "
        "after %.2f s, in sync after %.2f s\n",
        round, shard, r, was_primary ? "primary" : "backup",
        failover_seconds.back(), in_sync_seconds.back());
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) EXPECT_EQ(errors[c], "") << "client " << c;
  std::printf("%d pushes acknowledged\n", acked.load());
  EXPECT_GT(acked.load(), 100);

  for (int shard = 0; shard < kShards; ++shard) {
    ASSERT_TRUE(AllInSync(shard, absl::Seconds(30)));
    const std::vector<uint64_t> digests = Digests(shard);
    EXPECT_EQ(digests[0], digests[1]) << "shard " << shard;
  }
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
  std::vector<float> values(kKeys * kDim);
  ASSERT_OK(setup->Pull(table, keys, absl::MakeSpan(values)));
  int wrong = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    const double want = -(expected[0][k] + expected[1][k]);
    for (int d = 0; d < kDim; ++d) {
      if (values[k * kDim + d] != want && ++wrong <= 5) {
        ADD_FAILURE() << "key " << k << ": " << values[k * kDim + d]
                      << " != " << want;
      }
    }
  }
  EXPECT_EQ(wrong, 0);
}

// A replica that restarts while no one writes catches up all the same:
// the primary's last write is long past, and nothing new will come.
TEST_P(ReplicationTest, AReplicaCatchesUpWhileNothingIsWritten) {
  ASSERT_OK_AND_ASSIGN(Writer writer, ConnectWriter(Servers()));
  auto& [setup, table, keys, grads] = writer;
  for (int i = 0; i < 40; ++i) ASSERT_OK(setup->Push(table, keys, grads));
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView view, View(0));
  const int backup = 1 - PrimaryIndex(view, 0);
  replicas_[0][backup]->Signal(SIGKILL);
  replicas_[0][backup]->Wait();
  ASSERT_OK_AND_ASSIGN(replicas_[0][backup], StartReplica(0, backup));
  // Until the restarted replica's first heartbeat the directory's view may
  // still list the killed process as in sync: wait for the view and the
  // two replicas' contents to agree.
  std::vector<uint64_t> digests;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  do {
    if (AllInSync(0, absl::Seconds(1))) digests = Digests(0);
  } while ((digests.empty() || digests[0] != digests[1]) &&
           absl::Now() < give_up);
  ASSERT_EQ(digests.size(), 2u);
  EXPECT_NE(digests[0], 0u);
  EXPECT_EQ(digests[0], digests[1]);
}

// A hot-row tier's write-back goes through the shard's write order: the
// backup holds the written rows as the primary does.
TEST_P(ReplicationTest, WrittenBackRowsReachTheBackup) {
  ASSERT_OK_AND_ASSIGN(Writer writer, ConnectWriter(Servers()));
  auto& [client, table, keys, grads] = writer;
  ASSERT_OK(client->Push(table, keys, grads));
  const size_t record_bytes = 8 + sizeof(float) * kDim;  // SGD: no state
  std::vector<char> records(keys.size() * record_bytes);
  std::unique_ptr<bool[]> flags(new bool[keys.size()]);
  const absl::Span<bool> found = absl::MakeSpan(flags.get(), keys.size());
  ASSERT_OK(client->ReadRows(table, keys, 0, absl::MakeSpan(records), found));
  for (size_t i = 0; i < keys.size() * kDim; ++i) {
    const float value = 0.25f * static_cast<float>(i);
    std::memcpy(records.data() + (i / kDim) * record_bytes + 8 +
                    (i % kDim) * sizeof(float),
                &value, sizeof(value));
  }
  ASSERT_OK(client->WriteRows(table, keys, records, 0, found));
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(client->Lookup(table, keys, absl::MakeSpan(values)));
  EXPECT_EQ(values[kDim + 1], 0.25f * (kDim + 1));
  ASSERT_TRUE(AllInSync(0, absl::Seconds(20)));
  const std::vector<uint64_t> digests = Digests(0);
  ASSERT_EQ(digests.size(), 2u);
  EXPECT_EQ(digests[0], digests[1]);
}

// A primary cut off from the directory (stopped, as a long pause or a
// partition would) loses its lease: a backup takes over, and the old
// primary, resumed, accepts no write for its epoch (and leaves the shard).
TEST_P(ReplicationTest, ADeposedPrimaryAcceptsNoWrite) {
  ASSERT_OK_AND_ASSIGN(Writer writer, ConnectWriter(Servers()));
  auto& [setup, table, keys, grads] = writer;
  ASSERT_OK(setup->Push(table, keys, grads));
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView before, View(0));
  const int old = PrimaryIndex(before, 0);
  replicas_[0][old]->Signal(SIGSTOP);
  // A new primary within lease + grace (1.5 s) and a heartbeat.
  proto::ReplicaView after;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    absl::StatusOr<proto::ReplicaView> view = View(0);
    if (view.ok() && view->epoch() > before.epoch()) {
      after = *view;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(after.primary(), Address(0, 1 - old));
  // Writes through the client go to the new primary.
  ASSERT_OK(setup->Push(table, keys, grads));
  // The old primary, resumed, is asked directly: it must refuse.
  replicas_[0][old]->Signal(SIGCONT);
  client::ClientOptions options;
  options.servers = {Address(0, old)};
  options.retry.retry_deadline = absl::Seconds(1);
  ASSERT_OK_AND_ASSIGN(auto alone, client::Client::Connect(options));
  const uint32_t id = table.shard_table_ids[0];
  client::TableHandle handle = table;
  handle.shard_table_ids = {id};
  const absl::Status refused = alone->Push(handle, keys, grads);
  EXPECT_FALSE(refused.ok());
  // Deposed, it leaves the shard (exit 75) for its supervisor to restart.
  EXPECT_EQ(replicas_[0][old]->Wait(), 75);
  replicas_[0][old].reset();
  // The table took exactly the two acknowledged pushes.
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(setup->Pull(table, keys, absl::MakeSpan(values)));
  for (float v : values) EXPECT_EQ(v, -2.0f);
}

// Split brain, audited per acknowledgement: while the primary is paused
// (SIGSTOP: a long pause or a partition) and replaced, and after it
// resumes, one sender per replica pushes straight to it, never rerouted,
// and records for every acknowledged push the epoch its acceptor names
// (trailing metadata). No epoch may have two acceptors, and the table
// holds every acknowledged push once (and a push whose sender's deadline
// passed during the pause at most once: its outcome is unknown to it).
TEST_P(ReplicationTest, NoEpochHasTwoAcceptors) {
  ASSERT_OK_AND_ASSIGN(Writer writer, ConnectWriter(Servers()));
  auto& [setup, table, keys, grads] = writer;
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView before, View(0));
  const int old = PrimaryIndex(before, 0);

  struct Ack {
    int replica;
    uint64_t epoch;
  };
  std::mutex mu;
  std::vector<Ack> acks;
  int unlabelled = 0;
  // Pushes whose outcome the sender never learned (its deadline passed
  // while the primary was paused): applied or not, either is correct.
  int in_doubt = 0;
  std::atomic<bool> stop{false};
  std::vector<std::thread> senders;
  for (int r = 0; r < kReplicas; ++r) {
    senders.emplace_back([&, r] {
      auto stub = proto::TrainingService::NewStub(grpc::CreateChannel(
          Address(0, r), grpc::InsecureChannelCredentials()));
      proto::PushRequest push;
      // The writer's members: C++17 lambdas cannot capture the bindings.
      push.set_table_id(writer.table.shard_table_ids[0]);
      push.set_keys(
          std::string(reinterpret_cast<const char*>(writer.keys.data()),
                      writer.keys.size() * sizeof(uint64_t)));
      push.set_gradients(
          std::string(reinterpret_cast<const char*>(writer.grads.data()),
                      writer.grads.size() * sizeof(float)));
      push.set_client_id(1000 + r);
      for (uint64_t sequence = 1; !stop.load(); ++sequence) {
        push.set_sequence(sequence);
        grpc::ClientContext context;
        context.set_deadline(
            absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
        proto::PushResponse response;
        const grpc::Status status = stub->Push(&context, push, &response);
        // In doubt: no answer in time, or UNAVAILABLE other than the
        // refusals made before applying ("is not the primary", "lease ...
        // ran out"): a primary deposed after it applied the push and sent
        // it to the backup that took over answers "no longer the primary"
        // or "not acknowledged", and a process leaving its shard drops the
        // connection. These senders never retry; a client would, and the
        // exactly-once log would take the push once.
        const bool refused_before_applying =
            absl::StrContains(status.error_message(), "is not the primary (") ||
            absl::StrContains(status.error_message(), "ran out");
        if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
            (status.error_code() == grpc::StatusCode::UNAVAILABLE &&
             !refused_before_applying)) {
          std::lock_guard<std::mutex> lock(mu);
          ++in_doubt;
        }
        if (status.ok()) {
          const auto& trailers = context.GetServerTrailingMetadata();
          const auto it = trailers.find(wire::kReplicaEpochMetadata);
          std::lock_guard<std::mutex> lock(mu);
          uint64_t epoch = 0;
          if (it == trailers.end() ||
              !absl::SimpleAtoi(
                  absl::string_view(it->second.data(), it->second.size()),
                  &epoch)) {
            ++unlabelled;
          } else {
            acks.push_back({r, epoch});
          }
        }
        absl::SleepFor(absl::Milliseconds(10));
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(300));
  replicas_[0][old]->Signal(SIGSTOP);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  bool replaced = false;
  while (!replaced && absl::Now() < give_up) {
    absl::StatusOr<proto::ReplicaView> view = View(0);
    replaced = view.ok() && view->epoch() > before.epoch();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(replaced);
  absl::SleepFor(absl::Milliseconds(500));  // the new primary writes
  replicas_[0][old]->Signal(SIGCONT);       // the old one, with its queue
  absl::SleepFor(absl::Milliseconds(1000));
  stop = true;
  for (std::thread& t : senders) t.join();
  // Deposed, it leaves the shard (exit 75) for its supervisor to restart.
  EXPECT_EQ(replicas_[0][old]->Wait(), 75);
  replicas_[0][old].reset();

  std::map<uint64_t, std::set<int>> acceptors;
  std::map<std::pair<uint64_t, int>, int> counts;
  for (const Ack& ack : acks) {
    acceptors[ack.epoch].insert(ack.replica);
    ++counts[{ack.epoch, ack.replica}];
  }
  for (const auto& [who, n] : counts) {
    std::printf("epoch %llu: %d pushes acknowledged by replica %d%s\n",
                static_cast<unsigned long long>(who.first), n, who.second,
                who.second == old ? " (the paused primary)" : "");
  }
  EXPECT_EQ(unlabelled, 0);
  for (const auto& [epoch, who] : acceptors) {
    EXPECT_EQ(who.size(), 1u) << "epoch " << epoch << " had two acceptors";
  }
  // Both epochs wrote: the old primary before its pause, the new one after.
  ASSERT_EQ(acceptors.size(), 2u);
  EXPECT_EQ(*acceptors[before.epoch()].begin(), old);
  EXPECT_EQ(*acceptors.rbegin()->second.begin(), 1 - old);
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(setup->Pull(table, keys, absl::MakeSpan(values)));
  // Every acknowledged push is in the table once; a push in doubt may be.
  for (float v : values) {
    EXPECT_LE(v, -static_cast<float>(acks.size()))
        << acks.size() << " acks, " << in_doubt << " in doubt";
    EXPECT_GE(v, -static_cast<float>(acks.size() + in_doubt))
        << acks.size() << " acks, " << in_doubt << " in doubt";
  }
}

// A primary cut off from the control plane — the coordinator stopped, or
// two of etcd's three members killed (no quorum: no lease is renewed, no
// election can happen) — stops accepting writes once its lease runs out,
// although the primary itself is up and reachable; when the control plane
// is back (one etcd member restarted is a quorum again), writes go on
// (with the same primary, or another after a failover) and the table
// holds exactly the acknowledged writes.
TEST_P(ReplicationTest, APrimaryCutOffFromTheControlPlaneStopsWriting) {
  ASSERT_OK_AND_ASSIGN(Writer writer, ConnectWriter(Servers()));
  auto& [setup, table, keys, grads] = writer;
  ASSERT_OK(setup->Push(table, keys, grads));
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView before, View(0));
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView before_1, View(1));
  // Pushes straight to the shards' primaries, never retried elsewhere.
  client::ClientOptions options;
  options.servers = {before.primary(), before_1.primary()};
  options.retry.retry_deadline = absl::Milliseconds(200);
  ASSERT_OK_AND_ASSIGN(auto direct, client::Client::Connect(options));
  const client::TableHandle handle = table;
  ASSERT_OK(direct->Push(handle, keys, grads));

  if (etcd()) {
    etcd_cluster_->Kill(1);
    etcd_cluster_->Kill(2);
  } else {
    coordinator_->Signal(SIGSTOP);
  }
  const absl::Time stopped = absl::Now();
  // Within the lease it may still write; past it, never.
  absl::SleepFor(absl::Milliseconds(before.lease_ms()) +
                 absl::Milliseconds(300));
  int refused = 0;
  for (int i = 0; i < 10; ++i) {
    const absl::Status status = direct->Push(handle, keys, grads);
    EXPECT_FALSE(status.ok())
        << "a write accepted " << absl::ToDoubleSeconds(absl::Now() - stopped)
        << " s after the control plane stopped";
    if (!status.ok()) ++refused;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(refused, 10);
  if (etcd()) {
    ASSERT_OK(etcd_cluster_->Restart(1));
  } else {
    coordinator_->Signal(SIGCONT);
  }
  // Writes go on through the client once a primary holds a lease again.
  ASSERT_OK(setup->Push(table, keys, grads));
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(setup->Pull(table, keys, absl::MakeSpan(values)));
  for (float v : values) EXPECT_EQ(v, -3.0f);
  if (etcd()) {
    // All of etcd down: the same as no quorum — writes stop one lease
    // later, and go on once etcd is back.
    for (int i = 0; i < 3; ++i) etcd_cluster_->Kill(i);
    absl::SleepFor(absl::Milliseconds(before.lease_ms()) +
                   absl::Milliseconds(300));
    EXPECT_FALSE(direct->Push(handle, keys, grads).ok())
        << "a write accepted with all of etcd down";
    ASSERT_OK(etcd_cluster_->RestartAll());
    ASSERT_OK(setup->Push(table, keys, grads));
    ASSERT_OK(setup->Pull(table, keys, absl::MakeSpan(values)));
    // The refused write left nothing.
    for (float v : values) EXPECT_EQ(v, -4.0f);
  }
  // Each shard has a primary (a deposed one has left: exit 75, for its
  // supervisor to restart).
  for (int shard = 0; shard < kShards; ++shard) {
    absl::StatusOr<proto::ReplicaView> view = View(shard);
    ASSERT_OK(view.status());
    EXPECT_FALSE(view->primary().empty()) << "shard " << shard;
  }
}

// Checkpoints are written by the primaries of a replicated job; a new
// replicated cluster restores them (one replica per shard with --restore,
// the other joining it) and serves the same rows; a third replica that
// restores rows of its own is refused.
TEST_P(ReplicationTest, CheckpointAndRestoreWithReplication) {
  auto setup = Connect(Servers());
  ASSERT_NE(setup, nullptr);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       setup->CreateTable(SgdTable()));
  std::vector<uint64_t> keys(200);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
  std::vector<float> grads(keys.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * (i % 7);
  ASSERT_OK(setup->Push(table, keys, grads));
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = tmp != nullptr ? tmp : "/tmp";
  client::Client::CheckpointOptions checkpoint;
  checkpoint.root = root;
  checkpoint.step = 7;
  ASSERT_OK(setup->Checkpoint(checkpoint).status());
  std::vector<float> before(keys.size() * kDim);
  ASSERT_OK(setup->Pull(table, keys, absl::MakeSpan(before)));
  setup.reset();

  // A new cluster: a new control plane, one replica per shard restoring.
  // Fresh ports: the old ones may belong to the new control plane by now.
  for (int shard = 0; shard < kShards; ++shard) {
    for (int r = 0; r < kReplicas; ++r) {
      replicas_[shard][r].reset();
      ports_[shard][r].clear();
    }
  }
  ASSERT_OK(StartControlPlane());
  for (int shard = 0; shard < kShards; ++shard) {
    std::vector<std::string> args = {absl::StrCat("--shard_index=", shard),
                                     absl::StrCat("--num_shards=", kShards),
                                     ControlPlaneFlag(), "--restore=" + root};
    ASSERT_OK_AND_ASSIGN(replicas_[shard][0],
                         ServerProcess::Start(kServer, args));
    const std::string& address = replicas_[shard][0]->address();
    ports_[shard][0] = address.substr(address.rfind(':') + 1);
    const absl::Time give_up = absl::Now() + absl::Seconds(20);
    while (absl::Now() < give_up) {
      absl::StatusOr<proto::ReplicaView> view = View(shard);
      if (view.ok() && view->primary() == Address(shard, 0)) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_OK_AND_ASSIGN(replicas_[shard][1], StartReplica(shard, 1));
    const std::string& joined = replicas_[shard][1]->address();
    ports_[shard][1] = joined.substr(joined.rfind(':') + 1);
    ASSERT_TRUE(AllInSync(shard, absl::Seconds(30))) << "shard " << shard;
  }
  auto restored = Connect(Servers());
  ASSERT_NE(restored, nullptr);
  ASSERT_OK_AND_ASSIGN(client::TableHandle again,
                       restored->CreateTable(SgdTable()));
  std::vector<float> after(keys.size() * kDim);
  ASSERT_OK(restored->Pull(again, keys, absl::MakeSpan(after)));
  EXPECT_EQ(after, before);
  for (int shard = 0; shard < kShards; ++shard) {
    const std::vector<uint64_t> digests = Digests(shard);
    EXPECT_EQ(digests[0], digests[1]) << "shard " << shard;
  }
  // A replica that restores rows of its own cannot join a shard that has a
  // primary (its rows would disagree): it leaves (exit 75), and the shard
  // goes on with the replicas it had.
  ASSERT_OK_AND_ASSIGN(
      auto stray,
      ServerProcess::Start(
          kServer, {"--shard_index=0", absl::StrCat("--num_shards=", kShards),
                    ControlPlaneFlag(), "--restore=" + root}));
  EXPECT_EQ(stray->Wait(), 75);
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView view, View(0));
  EXPECT_EQ(view.in_sync_size(), kReplicas);
  EXPECT_EQ(view.primary(), Address(0, 0));
  ASSERT_OK(restored->Push(again, keys, grads));
}

// A serving replica follows a replicated cluster (over etcd: the
// primaries it finds there; with the coordinator: --training_servers with
// a|b per shard, where a backup refuses Publish and Subscribe): it
// subscribes to each shard's primary, and after the primary of shard 0 is
// killed it follows the new primary: rows published then are served.
TEST_P(ReplicationTest, AServingReplicaFollowsTheShardsPrimaries) {
  ASSERT_OK_AND_ASSIGN(Writer writer, ConnectWriter(Servers()));
  auto& [setup, table, keys, grads] = writer;
  const char* tmp = std::getenv("TEST_TMPDIR");
  // A root of its own: other tests' checkpoints are not this job's.
  const std::string root =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/follow_",
                   GetParam() == ControlPlane::kEtcd ? "etcd" : "coordinator");
  std::filesystem::create_directories(root);
  ASSERT_OK(setup->Publish(0, "").status());  // publications start here
  client::Client::CheckpointOptions checkpoint;
  checkpoint.root = root;
  checkpoint.step = 1;
  ASSERT_OK(setup->Checkpoint(checkpoint).status());
  // Over etcd the replica finds the primaries there; else it is given
  // both replicas of each shard.
  std::vector<std::string> args = {
      "--role=serving", "--follow_checkpoints=" + root,
      "--checkpoint_root=" + root, "--checkpoint_poll=100ms",
      "--log_level=warn"};
  if (etcd()) {
    args.push_back(ControlPlaneFlag());
    args.push_back(absl::StrCat("--training_shards=", kShards));
  } else {
    args.push_back("--training_servers=" + absl::StrJoin(Servers(), ","));
  }
  ASSERT_OK_AND_ASSIGN(auto replica,
                       ServerProcess::Start(kServer, args, absl::Seconds(60)));
  client::ServingClientOptions options;
  options.replicas = {{replica->address()}};
  options.deadline = absl::Seconds(5);
  options.attempt_timeout = absl::Seconds(2);
  ASSERT_OK_AND_ASSIGN(auto serving, client::ServingClient::Connect(options));
  const auto served_at = [&](uint64_t step) {
    std::vector<client::ServingSlot> slots = {
        {"t", kDim, keys, {}, proto::POOLING_NONE}};
    std::vector<std::vector<float>> out;
    uint64_t version = 0;
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      if (serving->Lookup(slots, &out, 0, &version).ok() && version >= step) {
        return out[0];
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    std::string why;
    for (const auto& shard : serving->Versions()) {
      for (const auto& v : shard) why += v.ShortDebugString() + "; ";
    }
    ADD_FAILURE() << "version " << step << " never served (at " << version
                  << "): " << why;
    return std::vector<float>();
  };
  // A push, published at step 2: served through the primaries' streams.
  ASSERT_OK(setup->Push(table, keys, grads));
  ASSERT_OK(setup->Publish(2, "").status());
  for (float v : served_at(2)) EXPECT_EQ(v, -1.0f);
  // Shard 0's primary dies; the backup takes over. A checkpoint after the
  // failover is the replica's way back onto the stream (the new primary's
  // publisher is another one); rows published afterwards are served.
  ASSERT_OK_AND_ASSIGN(const proto::ReplicaView before, View(0));
  const int old = PrimaryIndex(before, 0);
  replicas_[0][old]->Signal(SIGKILL);
  replicas_[0][old]->Wait();
  replicas_[0][old].reset();
  ASSERT_OK(setup->Push(table, keys, grads));
  checkpoint.step = 3;
  ASSERT_OK(setup->Checkpoint(checkpoint).status());
  ASSERT_OK(setup->Publish(3, "").status());
  ASSERT_OK(setup->Push(table, keys, grads));
  ASSERT_OK(setup->Publish(4, "").status());
  for (float v : served_at(4)) EXPECT_EQ(v, -3.0f);
}

INSTANTIATE_TEST_SUITE_P(
    ControlPlanes, ReplicationTest,
    ::testing::Values(ControlPlane::kCoordinator, ControlPlane::kEtcd),
    [](const ::testing::TestParamInfo<ControlPlane>& info) {
      return info.param == ControlPlane::kEtcd ? "Etcd" : "Coordinator";
    });

}  // namespace
}  // namespace embedps
