// A SYNC DLRM job on replicated shards (2 workers × 2 shards × 2 replicas,
// real processes) during which a primary is killed: it finishes, and with
// the AUC of the same job without the kill (docs/operations.md
// "Replication") — with a coordinator, and with etcd (3 members) both
// electing the primaries and hosting the workers' rendezvous.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "control/etcd_client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/replication.grpc.pb.h"
#include "server/etcd_directory_client.h"
#include "testing/child_process.h"
#include "testing/etcd_cluster.h"
#include "testing/job_output.h"
#include "testing/planted_data.h"
#include "testing/server_process.h"

namespace embedps::testing {
namespace {

constexpr char kServer[] = "server/ps_server";
constexpr char kWorker[] = "worker/ps_worker";
constexpr char kConfig[] = "deploy/local/dlrm_small.txtpb";
constexpr int kShards = 2;
constexpr int kReplicas = 2;
constexpr int kWorkers = 2;

class ReplicationTrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(TestTempPath("data"));
    ASSERT_OK(WritePlantedData(*data_, 300000, 50000));
  }
  static void TearDownTestSuite() { delete data_; }

  struct Run {
    int exit_code = -1;
    double seconds = 0;
    std::string summary;
    std::string log;
  };

  // Trains on a fresh replicated cluster; with `kill_after`, SIGKILLs
  // shard 1's primary that long after the workers started. `etcd`: etcd
  // elects the primaries and the workers meet there; else a coordinator.
  Run Train(absl::Duration kill_after, bool etcd = false) {
    Run run;
    std::unique_ptr<ServerProcess> coordinator;
    std::unique_ptr<EtcdCluster> etcd_cluster;
    std::unique_ptr<server::EtcdDirectoryClient> etcd_directory;
    std::string control_flag;
    if (etcd) {
      auto cluster = EtcdCluster::Start(3);
      EXPECT_OK(cluster.status());
      if (!cluster.ok()) return run;
      etcd_cluster = *std::move(cluster);
      control_flag = "--control_plane=" + etcd_cluster->endpoints();
      control::EtcdOptions options;
      options.endpoints = etcd_cluster->endpoints();
      auto client = control::EtcdClient::Create(options);
      EXPECT_OK(client.status());
      if (!client.ok()) return run;
      etcd_directory = std::make_unique<server::EtcdDirectoryClient>(
          *std::move(client), server::EtcdDirectoryOptions{});
    } else {
      auto started = ServerProcess::Start(
          kServer, {"--role=coordinator", "--replica_lease=1s"});
      EXPECT_OK(started.status());
      if (!started.ok()) return run;
      coordinator = *std::move(started);
      control_flag = "--replica_directory=" + coordinator->address();
    }
    std::vector<std::unique_ptr<ServerProcess>> replicas[kShards];
    std::vector<std::string> servers;
    for (int s = 0; s < kShards; ++s) {
      std::vector<std::string> addresses;
      for (int r = 0; r < kReplicas; ++r) {
        auto replica = ServerProcess::Start(
            kServer, {absl::StrCat("--shard_index=", s),
                      absl::StrCat("--num_shards=", kShards),
                      absl::StrCat("--num_workers=", kWorkers), control_flag,
                      // The kill is of a primary, whose failover this
                      // timeout does not pace; a tight one only lets a
                      // loaded machine drop the backup before the kill.
                      "--forward_timeout=10s"});
        EXPECT_OK(replica.status());
        if (!replica.ok()) return run;
        addresses.push_back((*replica)->address());
        replicas[s].push_back(std::move(*replica));
      }
      servers.push_back(absl::StrJoin(addresses, "|"));
    }
    const auto directory =
        etcd ? nullptr
             : proto::ReplicaDirectory::NewStub(grpc::CreateChannel(
                   coordinator->address(), grpc::InsecureChannelCredentials()));
    auto view = [&](int shard) {
      if (etcd) {
        return etcd_directory->View(shard).value_or(proto::ReplicaView());
      }
      grpc::ClientContext context;
      proto::ReplicaViewRequest request;
      request.set_shard(shard);
      proto::ReplicaView v;
      directory->View(&context, request, &v).ok();
      return v;
    };
    for (int s = 0; s < kShards; ++s) {
      const absl::Time give_up = absl::Now() + absl::Seconds(30);
      while (view(s).in_sync_size() < kReplicas && absl::Now() < give_up) {
        absl::SleepFor(absl::Milliseconds(50));
      }
    }
    const std::string out = TestTempPath("out");
    run.log = TestTempPath("worker0.log");
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    const absl::Time start = absl::Now();
    for (int r = 0; r < kWorkers; ++r) {
      std::vector<std::string> args = {
          std::string("--config=") + kConfig,
          "--servers=" + absl::StrJoin(servers, ","),
          etcd ? control_flag : "--coordinator=" + coordinator->address(),
          absl::StrCat("--rank=", r),
          absl::StrCat("--world_size=", kWorkers),
          "--mode=sync",
          "--train_data=" + *data_ + "/train.txt",
          "--test_data=" + *data_ + "/test.txt",
          "--output_dir=" + out,
          "--log_level=warn"};
      auto p = ChildProcess::Spawn(kWorker, args, "",
                                   r == 0 ? run.log : "/dev/null");
      EXPECT_OK(p.status());
      if (p.ok()) ranks.push_back(std::move(*p));
    }
    if (kill_after > absl::ZeroDuration()) {
      absl::SleepFor(kill_after);
      const proto::ReplicaView at_kill = view(1);
      const std::string primary = at_kill.primary();
      // Killing the primary of a shard with no in-sync backup would test
      // nothing but the loss of the shard: say so rather than fail later.
      EXPECT_EQ(at_kill.in_sync_size(), kReplicas)
          << "shard 1 had lost its backup before the kill: "
          << at_kill.ShortDebugString();
      for (auto& replica : replicas[1]) {
        if (replica->address() == primary) {
          std::printf("killing shard 1's primary %s after %.1f s\n",
                      primary.c_str(),
                      absl::ToDoubleSeconds(absl::Now() - start));
          replica->Signal(SIGKILL);
          replica->Wait();
        }
      }
    }
    for (size_t r = 0; r < ranks.size(); ++r) {
      absl::StatusOr<int> code = ranks[r]->WaitFor(absl::Seconds(300));
      EXPECT_OK(code.status());
      if (r == 0 && code.ok()) run.exit_code = *code;
    }
    run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    run.summary = ReadFile(out + "/summary.json");
    return run;
  }

  static std::string* data_;
};

std::string* ReplicationTrainingTest::data_ = nullptr;

TEST_F(ReplicationTrainingTest, AJobWhosePrimaryIsKilledEndsWithTheSameAuc) {
  const Run calm = Train(absl::ZeroDuration());
  ASSERT_EQ(calm.exit_code, 0) << ReadFile(calm.log);
  const double auc = JsonNumber(calm.summary, "test_auc");
  std::printf("no kill: test AUC %.5f in %.1f s\n", auc, calm.seconds);
  const Run killed = Train(absl::Seconds(calm.seconds * 0.4));
  ASSERT_EQ(killed.exit_code, 0) << ReadFile(killed.log);
  const double auc_killed = JsonNumber(killed.summary, "test_auc");
  std::printf("primary killed: test AUC %.5f in %.1f s\n", auc_killed,
              killed.seconds);
  EXPECT_NEAR(auc_killed, auc, 0.002);
  // No process of ours decides: etcd elects, the workers meet in etcd.
  const Run over_etcd = Train(absl::Seconds(calm.seconds * 0.4), true);
  ASSERT_EQ(over_etcd.exit_code, 0) << ReadFile(over_etcd.log);
  const double auc_etcd = JsonNumber(over_etcd.summary, "test_auc");
  std::printf("over etcd, primary killed: test AUC %.5f in %.1f s\n", auc_etcd,
              over_etcd.seconds);
  EXPECT_NEAR(auc_etcd, auc, 0.002);
}

}  // namespace
}  // namespace embedps::testing
