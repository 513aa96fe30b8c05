// Real ps_server processes: what only a process shows (signals, flags,
// exit codes). The client and the services are tested in process
// (client/client_test, server/embedding_service_test).
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/coordination_client.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/health.grpc.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.pb.h"
#include "security/health_check.h"
#include "testing/child_process.h"
#include "testing/server_process.h"

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

// --help lists the server's flags; a flag that cannot work exits 2 naming
// it, before anything listens.
TEST(ServerProcessTest, HelpAndBadFlags) {
  const std::string out = ::testing::TempDir() + "/server_help.out";
  ASSERT_OK_AND_ASSIGN(auto help, testing::ChildProcess::Spawn(
                                      "server/ps_server", {"--help"}, out));
  EXPECT_EQ(help->Wait(), 1);  // absl's --help exits 1
  std::ifstream file(out);
  const std::string text((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  for (const char* flag :
       {"--shard_index", "--num_shards", "--restore", "--data_dir", "--host"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag << "\n" << text;
  }
  EXPECT_EQ(text.find("TEST_"), std::string::npos) << text;
  const std::string log = ::testing::TempDir() + "/server_bad.log";
  ASSERT_OK_AND_ASSIGN(
      auto bad,
      testing::ChildProcess::Spawn(
          "server/ps_server", {"--shard_index=2", "--num_shards=2", "--port=0"},
          "", log));
  EXPECT_EQ(bad->Wait(), 2);
  std::ifstream log_file(log);
  const std::string log_text((std::istreambuf_iterator<char>(log_file)),
                             std::istreambuf_iterator<char>());
  EXPECT_NE(log_text.find("--shard_index=2 must be in [0, --num_shards=2)"),
            std::string::npos)
      << log_text;
  const std::string keep_log = ::testing::TempDir() + "/server_keep.log";
  ASSERT_OK_AND_ASSIGN(
      auto keep, testing::ChildProcess::Spawn(
                     "server/ps_server", {"--keep_checkpoints=-1", "--port=0"},
                     "", keep_log));
  EXPECT_EQ(keep->Wait(), 2);
  std::ifstream keep_file(keep_log);
  const std::string keep_text((std::istreambuf_iterator<char>(keep_file)),
                              std::istreambuf_iterator<char>());
  EXPECT_NE(keep_text.find("--keep_checkpoints=-1 must be >= 0"),
            std::string::npos)
      << keep_text;
  // --serving_storage: a name it knows, and a serving replica's only.
  for (const auto& [args, why] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--role=serving", "--follow_checkpoints=/nonexistent",
             "--serving_storage=bfloat16", "--port=0"},
            "none of float32, float16, int8"},
           {{"--serving_storage=int8", "--port=0"},
            "--serving_storage applies to --role=serving only"},
           {{"--pull_threads=0", "--port=0"},
            "--pull_threads=0 must be in [1, 64]"}}) {
    const std::string storage_log = ::testing::TempDir() + "/storage.log";
    ASSERT_OK_AND_ASSIGN(
        auto storage, testing::ChildProcess::Spawn("server/ps_server", args, "",
                                                   storage_log));
    EXPECT_EQ(storage->Wait(), 2);
    std::ifstream storage_file(storage_log);
    const std::string text((std::istreambuf_iterator<char>(storage_file)),
                           std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(why), std::string::npos) << text;
  }
}

// A misconfigured cluster is refused before anything reads or changes a
// table: real ps_server processes, each stating who it is (its flags), and
// clients given them in lists that do not match. Each case names the
// servers involved and what each said; no server received a table call.
TEST(MisconfiguredClusterTest, IsRefusedBeforeAnyTableCall) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  const auto start = [&](std::vector<std::string> args) -> std::string {
    auto server = ServerProcess::Start("server/ps_server", std::move(args));
    EXPECT_OK(server.status());
    if (!server.ok()) return "";
    servers.push_back(*std::move(server));
    return servers.back()->address();
  };
  const std::string a = start({});  // the defaults: shard 0 of 1
  const std::string b = start({});  // the same again
  const std::string c0 = start({"--shard_index=0", "--num_shards=3"});
  const std::string c1 = start({"--shard_index=1", "--num_shards=3"});
  const std::string x0 =
      start({"--shard_index=0", "--num_shards=2", "--cluster_id=x"});
  const std::string x1 =
      start({"--shard_index=1", "--num_shards=2", "--cluster_id=x"});
  const std::string y1 =
      start({"--shard_index=1", "--num_shards=2", "--cluster_id=y"});
  ASSERT_EQ(servers.size(), 7u);
  struct Case {
    std::string name;
    std::vector<std::string> servers;
    std::string cluster_id;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"a duplicate shard",
       {a, b},
       "",
       {"server 0 (" + a + ") says it is a training shard 0 of 1",
        "server 1 (" + b + ") says it is a training shard 0 of 1",
        "both claim shard 0"}},
      {"a wrong shard count",
       {c0, c1},
       "",
       {"server 0 (" + c0 + ") says it is a training shard 0 of 3",
        "the list has 2"}},
      {"shards out of order",
       {x1, x0},
       "",
       {"server 0 (" + x1 + ") says it is a training shard 1 of 2",
        "server 1 (" + x0 + ") says it is a training shard 0 of 2"}},
      {"a shard of another cluster",
       {x0, y1},
       "",
       {"server 1 (" + y1 +
            ") says it is a training shard 1 of 2 of "
            "cluster 'y'",
        "server 0 (" + x0 +
            ") says it is a training shard 0 of 2 of "
            "cluster 'x'"}},
      {"not the cluster asked for", {x0, x1}, "prod", {"cluster 'prod'"}},
  };
  proto::TableConfig config;
  config.set_name("t");
  config.set_dim(4);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    client::ClientOptions options;
    options.servers = c.servers;
    options.cluster_id = c.cluster_id;
    ASSERT_OK_AND_ASSIGN(auto client, client::Client::Connect(options));
    const absl::Status created = client->CreateTable(config).status();
    EXPECT_THAT(created, StatusIs(absl::StatusCode::kFailedPrecondition));
    for (const std::string& said : c.says) {
      EXPECT_THAT(created.message(), HasSubstr(said));
    }
    // A handle made by hand does not get past it either.
    client::TableHandle handle;
    handle.name = "t";
    handle.dim = 4;
    handle.shard_table_ids.assign(c.servers.size(), 1);
    std::vector<float> values(4);
    EXPECT_THAT(client->Pull(handle, {7}, absl::MakeSpan(values)),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(client->Push(handle, {7}, values),
                StatusIs(absl::StatusCode::kFailedPrecondition));
  }
  // Nothing reached a table: every server holds none.
  for (const auto& server : servers) {
    client::ClientOptions options;
    options.servers = {server->address()};
    ASSERT_OK_AND_ASSIGN(auto one, client::Client::Connect(options));
    ASSERT_OK_AND_ASSIGN(const auto stats, one->Stats());
    EXPECT_EQ(stats[0].table_size(), 0) << server->address();
  }
  // The same servers in a list that matches: accepted.
  client::ClientOptions options;
  options.servers = {x0, x1};
  options.cluster_id = "x";
  ASSERT_OK_AND_ASSIGN(auto client, client::Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(const client::TableHandle table,
                       client->CreateTable(config));
  std::vector<float> values(4);
  EXPECT_OK(client->Pull(table, {7}, absl::MakeSpan(values)));
  // A cluster id the server cannot state is refused at its start.
  const std::string log = ::testing::TempDir() + "/cluster_id.log";
  ASSERT_OK_AND_ASSIGN(
      auto bad,
      testing::ChildProcess::Spawn("server/ps_server",
                                   {"--cluster_id=a b", "--port=0"}, "", log));
  EXPECT_NE(bad->Wait(), 0);
  std::ifstream file(log);
  const std::string text((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("cluster_id must be"), std::string::npos) << text;
}

// A second server on a port in use exits naming it, instead of starting
// beside the first and taking part of its connections (gRPC's default
// SO_REUSEPORT).
TEST(ServerProcessTest, APortInUseIsRefused) {
  ASSERT_OK_AND_ASSIGN(auto first,
                       testing::ServerProcess::Start("server/ps_server", {}));
  const std::string port =
      first->address().substr(first->address().rfind(':') + 1);
  const std::string log = ::testing::TempDir() + "/server_port_in_use.log";
  ASSERT_OK_AND_ASSIGN(
      auto second, testing::ChildProcess::Spawn("server/ps_server",
                                                {"--port=" + port}, "", log));
  ASSERT_OK_AND_ASSIGN(int code, second->WaitFor(absl::Seconds(30)));
  EXPECT_NE(code, 0);
  std::ifstream log_file(log);
  const std::string log_text((std::istreambuf_iterator<char>(log_file)),
                             std::istreambuf_iterator<char>());
  EXPECT_NE(log_text.find("cannot listen on"), std::string::npos) << log_text;
}

// The Coordination store of a real server is bounded: Sets past its
// limits are refused, what it holds stays, and it keeps serving.
TEST(ServerProcessTest, TheCoordinationStoreRefusesPastItsLimits) {
  ASSERT_OK_AND_ASSIGN(
      auto server, testing::ServerProcess::Start(
                       "server/ps_server", {"--max_coordination_mb=1",
                                            "--max_coordination_keys=100"}));
  ASSERT_OK_AND_ASSIGN(auto store,
                       client::CoordinationClient::Create(server->address()));
  const std::string big(600 << 10, 'x');
  ASSERT_OK(store->Set("a", big));
  EXPECT_THAT(store->Set("b", big),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--max_coordination_mb")));
  for (int i = 0; i < 99; ++i) ASSERT_OK(store->Set(absl::StrCat("k", i), "v"));
  EXPECT_THAT(store->Set("one-more", "v"),
              StatusIs(absl::StatusCode::kResourceExhausted));
  ASSERT_OK_AND_ASSIGN(std::string a, store->Get("a"));
  EXPECT_EQ(a.size(), big.size());
  EXPECT_THAT(store->Get("b"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(server->Stop(), 0);
}

// The ports open without a token cannot be pinned: 2,000 health Watch
// streams over 20 connections of one host get 8 streams (a host's share
// of the 64) and RESOURCE_EXHAUSTED for the rest (gRPC's default service
// held all of them, ~14 KB each), Check
// still answers; 64 idle TCP connections to /metrics leave the next scrape
// answered within a scrape's usual timeout (httplib's defaults kept it
// waiting 39 s).
TEST(ServerProcessTest, UnauthenticatedPortsCannotBePinned) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       ServerProcess::Start(kServer, {"--metrics_port=0"}));
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int c = 0; c < 20; ++c) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // own connections
    channels.push_back(grpc::CreateCustomChannel(
        server->address(), grpc::InsecureChannelCredentials(), args));
  }
  struct Stream {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReader<grpc::health::v1::HealthCheckResponse>>
        reader;
  };
  std::vector<Stream> streams;
  int watching = 0, refused = 0, other = 0;
  for (int i = 0; i < 2000; ++i) {
    auto stub = grpc::health::v1::Health::NewStub(channels[i % 20]);
    Stream stream{std::make_unique<grpc::ClientContext>(), nullptr};
    stream.reader = stub->Watch(stream.context.get(),
                                grpc::health::v1::HealthCheckRequest());
    grpc::health::v1::HealthCheckResponse response;
    if (stream.reader->Read(&response) &&
        response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      ++watching;
      streams.push_back(std::move(stream));
    } else if (stream.reader->Finish().error_code() ==
               grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++refused;
    } else {
      ++other;
    }
  }
  EXPECT_EQ(watching, 8);
  EXPECT_EQ(refused, 2000 - 8);
  EXPECT_EQ(other, 0);
  EXPECT_OK(security::CheckHealth(server->address(), {}, absl::Seconds(5)));

  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(server->metrics_port()));
    ASSERT_EQ(
        connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    idle.push_back(fd);
  }
  httplib::Client http("127.0.0.1", server->metrics_port());
  http.set_read_timeout(10, 0);  // Prometheus's default scrape timeout
  httplib::Result scrape = http.Get("/metrics");
  ASSERT_TRUE(scrape) << httplib::to_string(scrape.error());
  EXPECT_EQ(scrape->status, 200);
  for (int fd : idle) close(fd);
  for (Stream& stream : streams) stream.context->TryCancel();
  streams.clear();
  EXPECT_EQ(server->Stop(), 0);
}

// The line of a /metrics page that starts with `name`, or "".
std::string MetricLine(const std::string& page, const std::string& name) {
  for (size_t at = page.find(name); at != std::string::npos;
       at = page.find(name, at + 1)) {
    if (at == 0 || page[at - 1] == '\n') {
      return page.substr(at, page.find('\n', at) - at);
    }
  }
  return "";
}

uint64_t ResidentBytesOf(pid_t pid) {
  std::ifstream statm(absl::StrCat("/proc/", pid, "/statm"));
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// gRPC 1.51 closes its listener for good once accept fails with EMFILE
// (grpc/grpc#20418): after one burst of connections past the descriptor
// limit, a server took no new connection again. With the limit lowered to
// 128 while the server runs, 400 connections at once: those past the cap
// are closed at once, a client connected before keeps working, and after
// the burst a new client connects and pulls.
TEST_F(ClusterTest,
       ABurstOfConnectionsPastTheDescriptorLimitLeavesItAccepting) {
  StartShards(1, {"--metrics_port=0"});
  auto before = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       before->CreateTable(SgdTable("burst")));
  std::vector<float> values(kDim);
  ASSERT_OK(
      before->Pull(table, std::vector<uint64_t>{1}, absl::MakeSpan(values), 0));
  const rlimit low{128, 128};
  ASSERT_EQ(prlimit(servers_[0]->pid(), RLIMIT_NOFILE, &low, nullptr), 0);

  const int port =
      std::stoi(addresses_[0].substr(addresses_[0].rfind(':') + 1));
  std::vector<int> burst;
  for (int i = 0; i < 400; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(port));
    connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    burst.push_back(fd);
  }
  absl::SleepFor(absl::Seconds(1));
  EXPECT_OK(
      before->Pull(table, std::vector<uint64_t>{2}, absl::MakeSpan(values), 0));
  for (int fd : burst) close(fd);
  // Its connection goes with it (gRPC would share it with the next client).
  before.reset();
  absl::SleepFor(absl::Milliseconds(500));

  auto after = Connect();
  EXPECT_OK(
      after->Pull(table, std::vector<uint64_t>{3}, absl::MakeSpan(values), 0));
  httplib::Client http("127.0.0.1", servers_[0]->metrics_port());
  httplib::Result scrape = http.Get("/metrics");
  ASSERT_TRUE(scrape) << httplib::to_string(scrape.error());
  EXPECT_EQ(MetricLine(scrape->body, "embedps_descriptor_limit "),
            "embedps_descriptor_limit 128");
  EXPECT_NE(MetricLine(scrape->body, "embedps_connections_shed_total "),
            "embedps_connections_shed_total 0");
}

// A peer that opens Pull streams and never reads them: the server holds
// at most --max_unread_mb_per_peer of their answers (64 MiB: 4 answers of
// 16 MiB) and answers the rest UNAVAILABLE; once the streams go, the
// host's Pulls are served again. Without the bound, each 32 KB request
// held a 16 MiB answer.
TEST_F(ClusterTest, APeerThatNeverReadsHoldsAtMostItsBudgetOfAnswers) {
  StartShards(1, {"--metrics_port=0", "--max_unread_mb_per_peer=64"});
  auto worker = Connect();
  proto::TableConfig config = SgdTable("wide");
  config.set_dim(1024);
  ASSERT_OK_AND_ASSIGN(client::TableHandle table, worker->CreateTable(config));
  proto::PullRequest pull;
  pull.set_table_id(table.shard_table_ids[0]);
  pull.set_read_only(true);  // no rows made: the answers are what grows
  std::string keys(4096 * sizeof(uint64_t), '\0');
  for (uint64_t k = 0; k < 4096; ++k) {
    std::memcpy(keys.data() + k * sizeof(uint64_t), &k, sizeof(k));
  }
  pull.set_keys(keys);
  const std::string request = pull.SerializeAsString();
  const uint64_t before = ResidentBytesOf(servers_[0]->pid());

  // A small receive window, never read: the answers stay on the server.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 65536);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  grpc::GenericStub stub(grpc::CreateCustomChannel(
      addresses_[0], grpc::InsecureChannelCredentials(), args));
  grpc::CompletionQueue queue;
  struct Stuck {
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
    grpc::Status status;
  };
  const auto wait = [&queue] {
    void* tag = nullptr;
    bool ok = false;
    return queue.Next(&tag, &ok) && ok;
  };
  std::vector<std::unique_ptr<Stuck>> streams;
  for (int i = 0; i < 16; ++i) {
    auto call = std::make_unique<Stuck>();
    call->stream = stub.PrepareCall(
        &call->context, "/embedps.proto.TrainingService/Pull", &queue);
    call->stream->StartCall(call.get());
    ASSERT_TRUE(wait());
    grpc::Slice slice(request);
    call->stream->Write(grpc::ByteBuffer(&slice, 1), call.get());
    ASSERT_TRUE(wait());
    call->stream->WritesDone(call.get());
    ASSERT_TRUE(wait());
    streams.push_back(std::move(call));
  }
  absl::SleepFor(absl::Seconds(2));
  httplib::Client http("127.0.0.1", servers_[0]->metrics_port());
  httplib::Result scrape = http.Get("/metrics");
  ASSERT_TRUE(scrape) << httplib::to_string(scrape.error());
  EXPECT_EQ(MetricLine(scrape->body,
                       "embedps_rejected_requests_total{reason=\"unread_"
                       "answers\"}"),
            "embedps_rejected_requests_total{reason=\"unread_answers\"} 12");
  const uint64_t grown = ResidentBytesOf(servers_[0]->pid()) - before;
  EXPECT_LT(grown, uint64_t{128} << 20) << "16 answers of 16 MiB held";
  // Meanwhile the host is asked to read before it pulls more.
  std::vector<uint64_t> few = {1, 2, 3};
  std::vector<float> values(few.size() * 1024);
  EXPECT_THAT(worker->Pull(table, few, absl::MakeSpan(values), 0),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("--max_unread_mb_per_peer")));

  for (auto& call : streams) call->context.TryCancel();
  for (auto& call : streams) call->stream->Finish(&call->status, call.get());
  for (size_t i = 0; i < streams.size(); ++i) {
    void* tag = nullptr;
    bool ok = false;
    ASSERT_TRUE(queue.Next(&tag, &ok));
  }
  streams.clear();
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_OK(worker->Pull(table, few, absl::MakeSpan(values), 0));
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace embedps
