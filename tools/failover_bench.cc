// failover_bench: how soon writes resume after a replicated shard's
// primary is killed, with etcd electing the primaries against the
// built-in coordinator, in one run; and what the replicas ask of etcd.
//
//   bazel build -c opt //tools:failover_bench //server:ps_server
//   cd bazel-bin && tools/failover_bench [--rounds=10]
//
// For each control plane: one shard of two replicas (ps_server processes)
// with a 2 s lease (the coordinator's --replica_lease=2s; etcd's minimum
// TTL with its default timing), one client pushing without pause (its
// calls fail over between the replicas), and `rounds` times: both
// replicas in sync, the primary SIGKILLed, the time until the next push
// is acknowledged, the killed one restarted on its port. Printed: p50
// and max of those times per control plane. Then, over etcd: the gRPC
// requests etcd served (its own /metrics) per replica and second, at
// steady state (the 2 replicas idle-writing) and during the failovers,
// scaled to 100 and 1,000 servers.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/exit_on_error.h"
#include "client/client.h"
#include "control/etcd_client.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "proto/replication.grpc.pb.h"
#include "server/etcd_directory_client.h"
#include "testing/etcd_cluster.h"
#include "testing/server_process.h"

ABSL_FLAG(int32_t, rounds, 10, "primaries killed per control plane");
ABSL_FLAG(std::string, server_binary, "server/ps_server",
          "ps_server, relative to the working directory");

namespace embedps::tools {
namespace {

using bench::Die;
using bench::Must;
using testing::EtcdCluster;
using testing::ServerProcess;

constexpr int kDim = 8;

struct Plane {
  std::string name;
  std::unique_ptr<ServerProcess> coordinator;
  std::unique_ptr<EtcdCluster> etcd;
  std::unique_ptr<server::EtcdDirectoryClient> etcd_view;
  std::string flag;

  proto::ReplicaView View() {
    if (etcd_view != nullptr) {
      return etcd_view->View(0).value_or(proto::ReplicaView());
    }
    auto stub = proto::ReplicaDirectory::NewStub(grpc::CreateChannel(
        coordinator->address(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    proto::ReplicaViewRequest request;
    proto::ReplicaView view;
    (void)stub->View(&context, request, &view);
    return view;
  }
};

// etcd's gRPC requests served so far, summed over its members' /metrics.
double EtcdRequests(const EtcdCluster& etcd, int members) {
  double total = 0;
  for (int i = 0; i < members; ++i) {
    httplib::Client http(absl::StrCat("http://", etcd.client_address(i)));
    httplib::Result result = http.Get("/metrics");
    if (!result || result->status != 200) continue;
    for (absl::string_view line : absl::StrSplit(result->body, '\n')) {
      if (!absl::StartsWith(line, "grpc_server_handled_total{")) continue;
      const size_t space = line.rfind(' ');
      double value = 0;
      if (space != absl::string_view::npos &&
          absl::SimpleAtod(line.substr(space + 1), &value)) {
        total += value;
      }
    }
  }
  return total;
}

std::vector<double> Failovers(Plane& plane, int rounds,
                              const std::string& binary,
                              double* failover_seconds_total) {
  std::unique_ptr<ServerProcess> replicas[2];
  std::string ports[2];
  const auto start = [&](int r) {
    std::vector<std::string> args = {"--shard_index=0", "--num_shards=1",
                                     plane.flag, "--forward_timeout=1s",
                                     "--log_level=error"};
    if (!ports[r].empty()) args.push_back("--port=" + ports[r]);
    replicas[r] = Must(ServerProcess::Start(binary, args), "a replica");
    ports[r] =
        replicas[r]->address().substr(replicas[r]->address().rfind(':') + 1);
  };
  start(0);
  start(1);
  const auto address = [&](int r) { return "127.0.0.1:" + ports[r]; };
  const auto wait_in_sync = [&] {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (plane.View().in_sync_size() < 2) {
      if (absl::Now() > give_up)
        Die(absl::DeadlineExceededError("sync"), "sync");
      absl::SleepFor(absl::Milliseconds(50));
    }
  };
  wait_in_sync();
  client::ClientOptions options;
  options.servers = {address(0) + "|" + address(1)};
  options.retry.retry_deadline = absl::Seconds(60);
  options.retry.rpc_timeout = absl::Seconds(3);
  auto client = Must(client::Client::Connect(options), "client");
  proto::TableConfig config;
  config.set_name("t");
  config.set_dim(kDim);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  const client::TableHandle table = Must(client->CreateTable(config), "table");
  std::atomic<bool> stop{false};
  std::atomic<int64_t> last_ack_micros{0};
  std::thread writer([&] {
    const std::vector<uint64_t> keys = {1, 2, 3, 4};
    const std::vector<float> grads(keys.size() * kDim, 0.01f);
    while (!stop.load()) {
      if (client->Push(table, keys, grads).ok()) {
        last_ack_micros.store(absl::ToUnixMicros(absl::Now()));
      }
    }
  });
  std::vector<double> resumed;
  for (int round = 0; round < rounds; ++round) {
    wait_in_sync();
    absl::SleepFor(absl::Seconds(1));
    const std::string primary = plane.View().primary();
    const int victim = primary == address(0) ? 0 : 1;
    const absl::Time killed = absl::Now();
    replicas[victim]->Signal(SIGKILL);
    replicas[victim]->Wait();
    replicas[victim].reset();
    while (absl::FromUnixMicros(last_ack_micros.load()) <= killed) {
      if (absl::Now() - killed > absl::Seconds(60)) {
        Die(absl::DeadlineExceededError("no write resumed in 60 s"),
            "failover");
      }
      absl::SleepFor(absl::Milliseconds(1));
    }
    resumed.push_back(absl::ToDoubleSeconds(
        absl::FromUnixMicros(last_ack_micros.load()) - killed));
    *failover_seconds_total += absl::ToDoubleSeconds(absl::Now() - killed);
    start(victim);
  }
  wait_in_sync();
  stop = true;
  writer.join();
  return resumed;
}

void Print(const std::string& name, std::vector<double> times) {
  std::sort(times.begin(), times.end());
  std::printf("| %s | %zu | %.2f s | %.2f s |\n", name.c_str(), times.size(),
              times[times.size() / 2], times.back());
}

int Run() {
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const std::string binary = absl::GetFlag(FLAGS_server_binary);
  Plane coordinator;
  coordinator.name = "built-in coordinator (--replica_lease=2s)";
  coordinator.coordinator = Must(
      ServerProcess::Start(binary, {"--role=coordinator", "--replica_lease=2s",
                                    "--log_level=error"}),
      "the coordinator");
  coordinator.flag =
      "--replica_directory=" + coordinator.coordinator->address();
  double ignored = 0;
  const std::vector<double> by_coordinator =
      Failovers(coordinator, rounds, binary, &ignored);
  coordinator.coordinator.reset();

  Plane etcd;
  etcd.name = "etcd, 3 members (lease TTL 2 s)";
  etcd.etcd = Must(EtcdCluster::Start(3), "etcd");
  control::EtcdOptions options;
  options.endpoints = etcd.etcd->endpoints();
  etcd.etcd_view = std::make_unique<server::EtcdDirectoryClient>(
      Must(control::EtcdClient::Create(options), "etcd client"),
      server::EtcdDirectoryOptions{});
  etcd.flag = "--control_plane=" + etcd.etcd->endpoints();
  double failover_seconds = 0;
  const double before = EtcdRequests(*etcd.etcd, 3);
  const absl::Time began = absl::Now();
  const std::vector<double> by_etcd =
      Failovers(etcd, rounds, binary, &failover_seconds);
  const double during = EtcdRequests(*etcd.etcd, 3) - before;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - began);
  // Steady state: a new shard of two replicas (another cluster id: the
  // shard above waits for replicas of its own), nothing killed, for 10 s.
  const std::vector<std::string> steady_args = {
      "--shard_index=0", "--num_shards=1", etcd.flag, "--cluster_id=steady",
      "--log_level=error"};
  std::unique_ptr<ServerProcess> a =
      Must(ServerProcess::Start(binary, steady_args), "a replica");
  std::unique_ptr<ServerProcess> b =
      Must(ServerProcess::Start(binary, steady_args), "a replica");
  absl::SleepFor(absl::Seconds(3));
  const double steady_before = EtcdRequests(*etcd.etcd, 3);
  absl::SleepFor(absl::Seconds(10));
  const double steady =
      (EtcdRequests(*etcd.etcd, 3) - steady_before) / 10.0 / 2.0;

  std::printf(
      "\nWrites resume after the primary's SIGKILL (1 shard, 2 "
      "replicas, a client pushing without pause):\n\n");
  std::printf("| control plane | kills | p50 | max |\n|---|---|---|---|\n");
  Print(coordinator.name, by_coordinator);
  Print(etcd.name, by_etcd);
  // The failover run's requests per replica-second (2 replicas, one of
  // them restarting each round).
  const double busy = during / seconds / 2.0;
  std::printf(
      "\netcd requests served per replica and second (its "
      "grpc_server_handled_total):\n\n");
  std::printf(
      "| phase | per replica | 100 servers | 1,000 servers |\n"
      "|---|---|---|---|\n");
  std::printf("| steady state | %.1f/s | %.0f/s | %.0f/s |\n", steady,
              steady * 100, steady * 1000);
  std::printf(
      "| kill-and-restart rounds (%.0f s) | %.1f/s | %.0f/s | %.0f/s "
      "|\n",
      seconds, busy, busy * 100, busy * 1000);
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::tools::Run();
}
