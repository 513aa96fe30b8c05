// Test helper: a fixture with shards of one cluster in this process
// (server::Shard on 127.0.0.1:0) and clients connected to all of them.
#ifndef EMBEDPS_CLIENT_CLUSTER_TESTING_H_
#define EMBEDPS_CLIENT_CLUSTER_TESTING_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/tables.pb.h"
#include "server/shard_testing.h"

namespace embedps::client::testing {

class ClusterTest : public ::testing::Test {
 protected:
  // `n` shards started from `options` (shard_index and num_shards set).
  void StartShards(int n, server::ShardOptions options = {}) {
    cluster_.Start(n, options);
    addresses_ = cluster_.addresses();
  }

  // A client of every shard; a test failure (and null) if it cannot be
  // made.
  std::unique_ptr<Client> Connect(
      proto::ValueType wire = proto::FLOAT32,
      absl::Duration retry_deadline = absl::Seconds(5),
      int channels_per_shard = 1) {
    ClientOptions options;
    options.servers = addresses_;
    options.wire_type = wire;
    options.retry.retry_deadline = retry_deadline;
    options.channels_per_shard = channels_per_shard;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  server::testing::InProcessCluster cluster_;
  std::vector<std::string> addresses_;
};

}  // namespace embedps::client::testing

#endif  // EMBEDPS_CLIENT_CLUSTER_TESTING_H_
