// TrainingService and the shard's other faces (health, reflection,
// /metrics), in this process (server::Shard on 127.0.0.1:0): every kind
// of bad request is refused with its code and message and changes nothing.
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/key_hash.h"
#include "common/mutex.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/tables.pb.h"
#include "proto/training.grpc.pb.h"
#include "testing/in_process_cluster.h"
#include "wire/bulk_message.h"

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

class TrainingServiceTest : public testing::ClusterTest {
 protected:
};

// Sends malformed requests straight to one shard and checks the code, the
// message and that the table did not change.
TEST_F(TrainingServiceTest, BadInputIsRefusedAndChangesNothing) {
  server::ShardOptions strict;
  strict.service.max_keys_per_request = 100;
  StartShards(2, strict);
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

  auto stub = proto::TrainingService::NewStub(
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
    // Finite, but the last key comes twice and its summed gradient
    // overflows SGD's row to -inf: refused whole.
    Case c{"gradients that overflow a row", base,
           grpc::StatusCode::INVALID_ARGUMENT, "nothing was applied"};
    std::vector<uint64_t> keys = mine;
    keys.push_back(mine.back());
    std::vector<float> bad(keys.size() * kDim, 1.0f);
    bad[(keys.size() - 2) * kDim] = 3e38f;
    bad[(keys.size() - 1) * kDim] = 3e38f;
    c.push.set_keys(pack(keys));
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
            generic, absl::StrCat("/embedps.proto.TrainingService/", method),
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
  // NaN, Inf, and gradients that would overflow a row.
  EXPECT_EQ(stats[0].rejected_requests().at("non_finite_gradient"), 3u);
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

// Load's phases with bad input: an unknown phase, a COMMIT or ABORT of a
// transaction never prepared, a PREPARE of a path outside the checkpoint
// root. Each is refused (ABORT of nothing is a no-op) and the tables stay.
TEST_F(TrainingServiceTest, LoadPhasesRefuseBadInputAndChangeNothing) {
  server::ShardOptions options;
  options.checkpoint_root = ::testing::TempDir() + "/load_phases";
  std::filesystem::create_directories(options.checkpoint_root);
  StartShards(1, options);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("kept")));
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> ones(keys.size() * kDim, 1.0f);
  ASSERT_OK(client->Push(table, keys, ones));
  auto stub = proto::TrainingService::NewStub(
      grpc::CreateChannel(addresses_[0], grpc::InsecureChannelCredentials()));
  struct Case {
    std::string name;
    proto::LoadRequest request;
    grpc::StatusCode code;
    std::string message;
  };
  std::vector<Case> cases;
  {
    Case c{"unknown phase",
           {},
           grpc::StatusCode::INVALID_ARGUMENT,
           "is none of LOAD, PREPARE, COMMIT, ABORT"};
    c.request.set_phase(static_cast<proto::LoadRequest::Phase>(9));
    cases.push_back(c);
  }
  {
    Case c{"commit of nothing prepared",
           {},
           grpc::StatusCode::NOT_FOUND,
           "no Load prepared under that transaction"};
    c.request.set_phase(proto::LoadRequest::COMMIT);
    c.request.set_transaction("never-prepared");
    cases.push_back(c);
  }
  {
    Case c{"abort of nothing prepared", {}, grpc::StatusCode::OK, ""};
    c.request.set_phase(proto::LoadRequest::ABORT);
    c.request.set_transaction("never-prepared");
    cases.push_back(c);
  }
  {
    Case c{"prepare outside the root",
           {},
           grpc::StatusCode::PERMISSION_DENIED,
           ""};
    c.request.set_phase(proto::LoadRequest::PREPARE);
    c.request.set_transaction("t");
    c.request.set_path("/etc");
    cases.push_back(c);
  }
  for (const Case& c : cases) {
    grpc::ClientContext context;
    proto::LoadResponse response;
    const grpc::Status status = stub->Load(&context, c.request, &response);
    EXPECT_EQ(status.error_code(), c.code)
        << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(client->Pull(table, keys, absl::MakeSpan(values)));
  for (float v : values) EXPECT_EQ(v, -1.0f);
}

TEST_F(TrainingServiceTest, PrometheusMetricsMatchTheStatsRpc) {
  server::ShardOptions with_metrics;
  with_metrics.metrics_port = 0;
  StartShards(1, with_metrics);
  ASSERT_GT(cluster_.shard(0).metrics_port(), 0);
  auto client = Connect();
  ASSERT_OK_AND_ASSIGN(client::TableHandle table,
                       client->CreateTable(SgdTable("seen")));
  std::vector<float> values(3 * kDim);
  ASSERT_OK(client->Pull(table, {{1, 2, 3}}, absl::MakeSpan(values)));
  ASSERT_OK(client->Pull(table, {4}, absl::MakeSpan(values).subspan(0, kDim)));
  httplib::Client http("127.0.0.1", cluster_.shard(0).metrics_port());
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
TEST_F(TrainingServiceTest, ReflectionListsTheServices) {
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
  EXPECT_THAT(bytes, HasSubstr("embedps.proto.TrainingService"));
  EXPECT_THAT(bytes, HasSubstr("embedps.proto.Coordination"));
  EXPECT_THAT(bytes, HasSubstr("grpc.health.v1.Health"));
}

TEST_F(TrainingServiceTest, HealthServiceAnswersServing) {
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
  Mutex mu;
  CondVar cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   MutexLock lock(&mu);
                   status = s;
                   done = true;
                   cv.Signal();
                 });
  MutexLock lock(&mu);
  cv.Wait(&mu, [&] { return done; });
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes += std::string(s.begin(), s.end());
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

}  // namespace
}  // namespace embedps
