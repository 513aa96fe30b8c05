// The smallest embedps training client: connect to the shards, create a
// table, pull three rows, push their gradients, pull them again.
//
//   bazel build //examples/cpp:minimal_client //server:ps_server
//   bazel-bin/server/ps_server --port=50051 &
//   bazel-bin/examples/cpp/minimal_client --servers=localhost:50051
//
// docs/cpp_client.md walks through it.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "proto/tables.pb.h"

ABSL_FLAG(std::string, servers, "localhost:50051",
          "host:port of every shard, comma-separated, in shard order");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);

  // 1. A client of every shard.
  embedps::client::ClientOptions options;
  options.servers = absl::StrSplit(absl::GetFlag(FLAGS_servers), ',');
  absl::StatusOr<std::unique_ptr<embedps::client::Client>> client =
      embedps::client::Client::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "connect: %s\n", client.status().ToString().c_str());
    return 1;
  }

  // 2. A table: 8 floats a row, Adagrad on the server. Idempotent: a
  //    second run finds it and goes on.
  embedps::proto::TableConfig config;
  config.set_name("items");
  config.set_dim(8);
  config.mutable_optimizer()->set_kind(
      embedps::proto::OptimizerConfig::ADAGRAD);
  config.mutable_optimizer()->set_learning_rate(0.1f);
  absl::StatusOr<embedps::client::TableHandle> table =
      (*client)->CreateTable(config);
  if (!table.ok()) {
    std::fprintf(stderr, "create: %s\n", table.status().ToString().c_str());
    return 1;
  }

  // 3. Pull: rows are created on first touch (keys in any order, any
  //    duplicates).
  const std::vector<uint64_t> keys = {42, 7, 42};
  std::vector<float> rows(keys.size() * table->dim);
  if (absl::Status pulled = (*client)->Pull(*table, keys, absl::MakeSpan(rows));
      !pulled.ok()) {
    std::fprintf(stderr, "pull: %s\n", pulled.ToString().c_str());
    return 1;
  }
  const float before = rows[0];

  // 4. Push the rows' gradients (duplicates are summed), applied once by
  //    the server's optimizer.
  const std::vector<float> gradients(keys.size() * table->dim, 1.0f);
  if (absl::Status pushed = (*client)->Push(*table, keys, gradients);
      !pushed.ok()) {
    std::fprintf(stderr, "push: %s\n", pushed.ToString().c_str());
    return 1;
  }

  // 5. The rows moved against the gradient.
  if (absl::Status pulled = (*client)->Pull(*table, keys, absl::MakeSpan(rows));
      !pulled.ok()) {
    std::fprintf(stderr, "pull: %s\n", pulled.ToString().c_str());
    return 1;
  }
  std::printf("key 42, first value: %.6f before, %.6f after one push\n", before,
              rows[0]);
  return rows[0] < before ? 0 : 1;
}
