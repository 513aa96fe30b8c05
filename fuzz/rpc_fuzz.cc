// Fuzz target: every request type of the services a ps_server process
// serves — TrainingService and Coordination on a training shard,
// ServingService and TrainingService on a serving replica following it,
// ReplicaDirectory on a coordinator, Replication and Push on a replicated
// shard —
// sent as raw bytes over gRPC to real in-process shards (server/shard.h),
// so that gRPC's parsing, our bulk parsing and every handler see them.
// Save and Load run against a real --checkpoint_root; the shards have
// table and memory limits as a production server would.
//
// Input: byte 0 picks the shard and method (kMethods); the rest is the
// request message. Not covered: Subscribe (a server stream; its request
// is a step number).
//
// EMBEDPS_FUZZ_WRITE_SEEDS=DIR: Initialize writes one valid request of each
// method to DIR (how fuzz/corpus/rpc_fuzz was made) and exits.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "fuzz/seed_checkpoint.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "proto/coordination.pb.h"
#include "proto/replication.pb.h"
#include "proto/serving.pb.h"
#include "proto/stats.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.pb.h"
#include "server/shard.h"
#include "wire/bulk_codec.h"
#include "wire/bulk_message.h"

namespace embedps::fuzz {
namespace {

enum Target { kTraining, kServing, kCoordinator, kReplicated };

struct Method {
  Target target;
  const char* path;
};

constexpr Method kMethods[] = {
    {kTraining, "/embedps.proto.TrainingService/CreateTable"},
    {kTraining, "/embedps.proto.TrainingService/DropTable"},
    {kTraining, "/embedps.proto.TrainingService/ListTables"},
    {kTraining, "/embedps.proto.TrainingService/Pull"},
    {kTraining, "/embedps.proto.TrainingService/Push"},
    {kTraining, "/embedps.proto.StatsService/Stats"},
    {kTraining, "/embedps.proto.TrainingService/Save"},
    {kTraining, "/embedps.proto.TrainingService/AwaitSave"},
    {kTraining, "/embedps.proto.TrainingService/Load"},
    {kTraining, "/embedps.proto.TrainingService/Publish"},
    {kTraining, "/embedps.proto.Coordination/Set"},
    {kTraining, "/embedps.proto.Coordination/Get"},
    {kTraining, "/embedps.proto.Coordination/Wait"},
    {kTraining, "/embedps.proto.Coordination/Barrier"},
    {kServing, "/embedps.proto.ServingService/Lookup"},
    {kServing, "/embedps.proto.ServingService/Version"},
    {kServing, "/embedps.proto.ServingService/DenseModel"},
    {kServing, "/embedps.proto.TrainingService/Pull"},
    {kServing, "/embedps.proto.TrainingService/Push"},
    {kServing, "/embedps.proto.TrainingService/CreateTable"},
    {kServing, "/embedps.proto.TrainingService/Load"},
    {kServing, "/embedps.proto.StatsService/Stats"},
    {kCoordinator, "/embedps.proto.ReplicaDirectory/Heartbeat"},
    {kCoordinator, "/embedps.proto.ReplicaDirectory/Report"},
    {kCoordinator, "/embedps.proto.ReplicaDirectory/View"},
    {kReplicated, "/embedps.proto.Replication/Apply"},
    {kReplicated, "/embedps.proto.Replication/CatchUp"},
    {kReplicated, "/embedps.proto.TrainingService/Push"},
    // Deletion on request.
    {kTraining, "/embedps.proto.TrainingService/Erase"},
};
constexpr size_t kNumMethods = sizeof(kMethods) / sizeof(kMethods[0]);

constexpr auto Check = CheckSetUp;

class Servers {
 public:
  Servers() {
    char dir[] = "/tmp/embedps-rpc-fuzz-XXXXXX";
    Check(mkdtemp(dir) != nullptr ? absl::OkStatus()
                                  : absl::InternalError("mkdtemp"),
          "temporary directory");
    dir_ = dir;
    root_ = dir_ + "/root";
    std::filesystem::create_directories(root_ + "/scratch");

    server::ShardOptions training;
    training.checkpoint_root = root_;
    training.service.max_tables = 8;
    training.service.max_keys_per_request = 1 << 16;
    training.service.max_response_bytes = 16 << 20;
    training.service.memory_limit_bytes = uint64_t{3} << 30;
    training.max_message_bytes = 16 << 20;
    training.coordination.max_entries = 64;
    training.coordination.max_bytes = 1 << 20;
    absl::StatusOr<std::unique_ptr<server::Shard>> shard =
        server::Shard::Start(training);
    Check(shard.status(), "training shard");
    training_ = *std::move(shard);

    client::ClientOptions options;
    options.servers = {training_->address()};
    absl::StatusOr<std::unique_ptr<client::Client>> client =
        client::Client::Connect(options);
    Check(client.status(), "client");
    client_ = *std::move(client);
    Check(WriteSeedCheckpoint(*client_, root_), "seed checkpoint");

    server::ShardOptions serving;
    serving.role = server::ShardRole::kServing;
    serving.follow.checkpoint_root = root_;
    serving.follow.training_servers = {training_->address()};
    serving.follow.checkpoint_poll = absl::Milliseconds(200);
    serving.max_message_bytes = 16 << 20;
    serving.max_lookup_keys = 1 << 16;
    shard = server::Shard::Start(serving);
    Check(shard.status(), "serving replica");
    serving_ = *std::move(shard);

    server::ShardOptions coordinator;
    coordinator.role = server::ShardRole::kCoordinator;
    coordinator.directory.max_shards = 16;
    coordinator.directory.max_members = 8;
    shard = server::Shard::Start(coordinator);
    Check(shard.status(), "coordinator");
    coordinator_ = *std::move(shard);

    server::ShardOptions replicated;
    replicated.service.max_keys_per_request = 1 << 16;
    replicated.service.memory_limit_bytes = uint64_t{3} << 30;
    replicated.max_message_bytes = 16 << 20;
    replicated.replication.directory = coordinator_->address();
    replicated.replication.forward_timeout = absl::Milliseconds(200);
    shard = server::Shard::Start(replicated);
    Check(shard.status(), "replicated shard");
    replicated_ = *std::move(shard);

    for (const server::Shard* s : {training_.get(), serving_.get(),
                                   coordinator_.get(), replicated_.get()}) {
      grpc::ChannelArguments args;
      args.SetMaxSendMessageSize(32 << 20);
      args.SetMaxReceiveMessageSize(32 << 20);
      stubs_.push_back(
          std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(
              s->address(), grpc::InsecureChannelCredentials(), args)));
    }
  }

  ~Servers() {
    replicated_.reset();
    coordinator_.reset();
    serving_.reset();
    training_.reset();
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  void Call(const Method& method, const grpc::ByteBuffer& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(300));
    grpc::ByteBuffer response;
    (void)wire::BulkUnaryCall(*stubs_[method.target], method.path, &context,
                              request, &response);
    if (++calls_ % 512 == 0) RemoveScratch();
  }

 private:
  // Saves the fuzzer names write files under the root; only the seed
  // checkpoint is kept.
  void RemoveScratch() {
    std::error_code error;
    for (const auto& entry :
         std::filesystem::directory_iterator(root_, error)) {
      if (entry.path().filename() != kSeedCheckpoint) {
        std::filesystem::remove_all(entry.path(), error);
      }
    }
    std::filesystem::create_directories(root_ + "/scratch", error);
  }

  std::string dir_, root_;
  std::unique_ptr<server::Shard> training_, serving_, coordinator_, replicated_;
  std::unique_ptr<client::Client> client_;
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs_;
  uint64_t calls_ = 0;
};

Servers* servers = nullptr;

void WriteSeed(const std::string& dir, const std::string& name, uint8_t method,
               const std::string& body) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      << static_cast<char>(method) << body;
}

std::string Bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  (void)buffer.Dump(&slices);
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

void WriteSeeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  const std::vector<uint64_t> keys = {1, 2, 5, 1ull << 40};
  const std::vector<uint32_t> rows = {0, 1, 2, 3};
  const std::vector<float> grads(16, 0.25f);
  proto::CreateTableRequest create;
  *create.mutable_config() = SeedTableConfig("u");
  WriteSeed(dir, "create", 0, create.SerializeAsString());
  proto::DropTableRequest drop;
  drop.set_name("u");
  WriteSeed(dir, "drop", 1, drop.SerializeAsString());
  WriteSeed(dir, "list", 2, "");
  proto::PullRequest pull;
  pull.set_table_id(0);
  WriteSeed(dir, "pull", 3, Bytes(wire::EncodePullRequest(pull, keys, rows)));
  proto::PushRequest push;
  push.set_table_id(0);
  push.set_client_id(7);
  push.set_sequence(1);
  WriteSeed(dir, "push", 4,
            Bytes(wire::EncodePushRequest(push, keys, rows, grads.data(), 4)));
  push.set_value_type(proto::FLOAT16);
  WriteSeed(dir, "push16", 4,
            Bytes(wire::EncodePushRequest(push, keys, rows, grads.data(), 4)));
  proto::StatsRequest stats;
  stats.add_table_id(0);
  stats.set_content_digest(true);
  WriteSeed(dir, "stats", 5, stats.SerializeAsString());
  proto::SaveRequest save;
  save.set_directory("scratch");
  save.set_name("ckpt-000000000002");
  save.set_step(2);
  WriteSeed(dir, "save", 6, save.SerializeAsString());
  save.set_directory("../outside");
  WriteSeed(dir, "save_outside", 6, save.SerializeAsString());
  proto::AwaitSaveRequest await;
  await.set_name("ckpt-000000000002");
  WriteSeed(dir, "await", 7, await.SerializeAsString());
  proto::LoadRequest load;
  load.set_path(kSeedCheckpoint);
  WriteSeed(dir, "load", 8, load.SerializeAsString());
  load.set_path("/etc");
  WriteSeed(dir, "load_outside", 8, load.SerializeAsString());
  proto::PublishRequest publish;
  publish.set_step(3);
  publish.set_dense_parameters(std::string(16, '\1'));
  WriteSeed(dir, "publish", 9, publish.SerializeAsString());
  proto::SetRequest set;
  set.set_key("k");
  set.set_value("v");
  WriteSeed(dir, "set", 10, set.SerializeAsString());
  proto::GetRequest get;
  get.set_key("k");
  WriteSeed(dir, "get", 11, get.SerializeAsString());
  proto::WaitRequest wait;
  wait.add_keys("k");
  wait.set_timeout_ms(50);
  WriteSeed(dir, "wait", 12, wait.SerializeAsString());
  proto::BarrierRequest barrier;
  barrier.set_name("b");
  barrier.set_participants(1);
  barrier.set_timeout_ms(50);
  WriteSeed(dir, "barrier", 13, barrier.SerializeAsString());
  proto::LookupRequest lookup;
  proto::LookupSlot* slot = lookup.add_slot();
  slot->set_table("t");
  slot->set_keys(std::string(reinterpret_cast<const char*>(keys.data()),
                             keys.size() * sizeof(uint64_t)));
  const std::vector<int32_t> offsets = {0, 2};
  slot->set_offsets(std::string(reinterpret_cast<const char*>(offsets.data()),
                                offsets.size() * sizeof(int32_t)));
  WriteSeed(dir, "lookup", 14, lookup.SerializeAsString());
  WriteSeed(dir, "version", 15, "");
  proto::DenseModelRequest dense;
  WriteSeed(dir, "dense", 16, dense.SerializeAsString());
  WriteSeed(dir, "serving_pull", 17,
            Bytes(wire::EncodePullRequest(pull, keys, rows)));
  push.set_value_type(proto::FLOAT32);
  WriteSeed(dir, "serving_push", 18,
            Bytes(wire::EncodePushRequest(push, keys, rows, grads.data(), 4)));
  WriteSeed(dir, "serving_create", 19, create.SerializeAsString());
  WriteSeed(dir, "serving_load", 20, load.SerializeAsString());
  WriteSeed(dir, "serving_stats", 21, stats.SerializeAsString());
  proto::HeartbeatRequest heartbeat;
  heartbeat.set_shard(0);
  heartbeat.set_member("127.0.0.1:1");
  heartbeat.set_incarnation(5);
  WriteSeed(dir, "heartbeat", 22, heartbeat.SerializeAsString());
  proto::ReplicaReport report;
  report.set_shard(0);
  report.set_epoch(1);
  report.set_primary("127.0.0.1:1");
  report.set_subject("127.0.0.1:2");
  WriteSeed(dir, "report", 23, report.SerializeAsString());
  proto::ReplicaViewRequest view;
  view.set_shard(0);
  WriteSeed(dir, "view", 24, view.SerializeAsString());
  proto::ApplyRequest apply;
  apply.set_epoch(1);
  apply.set_primary("127.0.0.1:1");
  proto::ReplicatedOp* op = apply.add_op();
  op->set_sequence(1);
  op->set_push(
      Bytes(wire::EncodePushRequest(push, keys, rows, grads.data(), 4)));
  *apply.add_op()->mutable_create_table() = create;
  WriteSeed(dir, "apply", 25, apply.SerializeAsString());
  proto::CatchUpRequest catch_up;
  catch_up.set_epoch(1);
  catch_up.set_member("127.0.0.1:1");
  WriteSeed(dir, "catch_up", 26, catch_up.SerializeAsString());
  WriteSeed(dir, "replicated_push", 27,
            Bytes(wire::EncodePushRequest(push, keys, rows, grads.data(), 4)));
}

}  // namespace
}  // namespace embedps::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using embedps::fuzz::servers;
  servers = new embedps::fuzz::Servers();
  std::atexit([] {
    delete servers;
    servers = nullptr;
  });
  embedps::fuzz::WriteSeedsIfAsked(embedps::fuzz::WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace embedps::fuzz;
  if (size < 1) return 0;
  const Method& method = kMethods[data[0] % kNumMethods];
  const grpc::Slice slice(data + 1, size - 1);
  servers->Call(method, grpc::ByteBuffer(&slice, 1));
  return 0;
}
