// serving_memory_bench: what a serving replica's rows cost in memory,
// next to what the same rows cost the training shard, in one run.
//
//   bazel build -c opt //tools:serving_memory_bench //server:ps_server
//   bazel-bin/tools/serving_memory_bench [--rows=1000000] [--dim=64]
//
// A training ps_server fills one Adagrad table (`rows` keys of `dim`
// floats) and checkpoints it; a second checkpoint holds the same table
// empty. Serving replicas (ps_server --role=serving) start: one on the
// empty checkpoint, and one on the full one for each storage
// (--serving_storage float32, float16, int8). Printed, per row, over the
// row's fp32 values (dim · 4 bytes), for each storage:
//   replica: the resident memory of the replica serving the rows minus
//     that of the replica serving the empty table (the process's own
//     memory, gRPC's and the allocator's, cancels out);
//   its table: the replica's table statistics (rows, index, arena);
// and the training shard's table statistics, values and accumulators, for
// comparison.
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/exit_on_error.h"
#include "bench/key_distributions.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "proto/stats.grpc.pb.h"
#include "testing/server_process.h"

ABSL_FLAG(uint64_t, rows, 1'000'000, "rows of the served table");
ABSL_FLAG(int32_t, dim, 64, "floats a row");
ABSL_FLAG(std::string, work_dir, "",
          "checkpoints go here (default: a directory under /tmp)");
ABSL_FLAG(std::string, server_binary, "server/ps_server",
          "ps_server, relative to the working directory");

namespace embedps::tools {
namespace {

using testing::ServerProcess;

using bench::Die;
using bench::Must;

proto::StatsResponse Stats(const std::string& address) {
  proto::StatsResponse stats;
  grpc::ClientContext context;
  const grpc::Status status =
      proto::StatsService::NewStub(
          grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))
          ->Stats(&context, proto::StatsRequest(), &stats);
  if (!status.ok()) {
    std::fprintf(stderr, "serving_memory_bench: Stats of %s: %s\n",
                 address.c_str(), status.error_message().c_str());
    std::exit(1);
  }
  return stats;
}

const proto::TableStatsProto& TableOf(const proto::StatsResponse& stats) {
  if (stats.table_size() != 1) {
    std::fprintf(stderr, "serving_memory_bench: %d tables, expected 1\n",
                 stats.table_size());
    std::exit(1);
  }
  return stats.table(0);
}

int Run() {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  if (rows == 0 || dim < 1) {
    std::fprintf(stderr,
                 "serving_memory_bench: --rows and --dim must be > 0\n");
    return 2;
  }
  std::string work = absl::GetFlag(FLAGS_work_dir);
  if (work.empty()) {
    work = absl::StrCat("/tmp/serving_memory_bench.", getpid());
  }
  const std::string full_root = work + "/full";
  const std::string empty_root = work + "/empty";
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(full_root);
  std::filesystem::create_directories(empty_root);
  const std::string binary = absl::GetFlag(FLAGS_server_binary);

  auto training = Must(
      ServerProcess::Start(binary, {"--checkpoint_root=" + work}), "training");
  client::ClientOptions options;
  options.servers = {training->address()};
  options.retry.rpc_timeout = absl::Minutes(5);
  auto client = Must(client::Client::Connect(options), "client");
  proto::TableConfig config;
  config.set_name("items");
  config.set_dim(dim);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  const client::TableHandle table =
      Must(client->CreateTable(config), "CreateTable");

  client::Client::CheckpointOptions checkpoint;
  checkpoint.root = empty_root;
  checkpoint.step = 1;
  Die(client->Checkpoint(checkpoint).status(), "empty checkpoint");
  constexpr uint64_t kBatch = 100'000;
  std::vector<uint64_t> batch;
  std::vector<float> values(kBatch * dim);
  std::vector<float> grads(kBatch * dim, 0.01f);
  for (uint64_t r = 0; r < rows; r += kBatch) {
    batch.clear();
    for (uint64_t k = r; k < std::min(rows, r + kBatch); ++k) {
      batch.push_back(bench::KeyOfRank(k));
    }
    const size_t n = batch.size() * dim;
    Die(client->Pull(table, batch, absl::MakeSpan(values.data(), n)), "fill");
    Die(client->Push(table, batch, absl::MakeConstSpan(grads.data(), n)),
        "push");
  }
  checkpoint.root = full_root;
  checkpoint.step = 2;
  Die(client->Checkpoint(checkpoint).status(), "checkpoint");

  const auto replica_of = [&](const std::string& root, const char* what,
                              const std::string& storage) {
    return Must(
        ServerProcess::Start(
            binary,
            {"--role=serving", "--checkpoint_root=" + work,
             "--follow_checkpoints=" + root, "--serving_storage=" + storage},
            absl::Minutes(10)),
        what);
  };
  auto empty = replica_of(empty_root, "replica of the empty table", "float32");
  const proto::StatsResponse training_stats = Stats(training->address());
  const double value_bytes = static_cast<double>(dim) * sizeof(float);
  const double training_row =
      static_cast<double>(TableOf(training_stats).resident_bytes()) /
      static_cast<double>(TableOf(training_stats).rows());
  std::printf(
      "serving_memory_bench: %" PRIu64
      " rows of dim %d (Adagrad in training), %.0f B of fp32 values a row\n",
      rows, dim, value_bytes);
  std::printf("%-44s %12s %10s\n", "", "bytes/row", "vs values");
  for (const char* storage : {"float32", "float16", "int8"}) {
    // One full replica at a time: each is measured alone beside the empty
    // one.
    auto full = replica_of(full_root, "replica of the full table", storage);
    absl::SleepFor(absl::Seconds(2));  // allocator settles after the load
    const proto::StatsResponse full_stats = Stats(full->address());
    const proto::StatsResponse empty_stats = Stats(empty->address());
    const double replica_row =
        (static_cast<double>(full_stats.resident_bytes()) -
         static_cast<double>(empty_stats.resident_bytes())) /
        static_cast<double>(rows);
    const double replica_table_row =
        static_cast<double>(TableOf(full_stats).resident_bytes()) /
        static_cast<double>(TableOf(full_stats).rows());
    std::printf(
        "%-44s %12.1f %9.2fx\n",
        absl::StrCat("serving replica ", storage, ", process (minus empty)")
            .c_str(),
        replica_row, replica_row / value_bytes);
    std::fprintf(stderr, "  (resident: replica %.1f MB, empty %.1f MB)\n",
                 static_cast<double>(full_stats.resident_bytes()) / 1e6,
                 static_cast<double>(empty_stats.resident_bytes()) / 1e6);
    std::printf(
        "%-44s %12.1f %9.2fx\n",
        absl::StrCat("serving replica ", storage, ", its table").c_str(),
        replica_table_row, replica_table_row / value_bytes);
    full->Stop();
  }
  std::printf("%-44s %12.1f %9.2fx\n", "training shard, its table",
              training_row, training_row / value_bytes);
  empty->Stop();
  training->Stop();
  std::filesystem::remove_all(work);
  return 0;
}

}  // namespace
}  // namespace embedps::tools

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::tools::Run();
}
