// Test fixtures: training shards of one cluster in this process
// (server::Shard on 127.0.0.1:0), and a gtest fixture with clients
// connected to all of them.
#ifndef EMBEDPS_TESTING_IN_PROCESS_CLUSTER_H_
#define EMBEDPS_TESTING_IN_PROCESS_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "proto/tables.pb.h"
#include "server/shard.h"

namespace embedps::testing {

// `n` shards of one cluster, each started from `options` with its
// shard_index and num_shards set.
class InProcessCluster {
 public:
  void Start(int n, const server::ShardOptions& options = {}) {
    for (int i = 0; i < n; ++i) {
      server::ShardOptions o = options;
      o.service.shard_index = i;
      o.service.num_shards = n;
      absl::StatusOr<std::unique_ptr<server::Shard>> shard =
          server::Shard::Start(o);
      ASSERT_TRUE(shard.ok()) << shard.status();
      addresses_.push_back((*shard)->address());
      shards_.push_back(*std::move(shard));
    }
  }
  const std::vector<std::string>& addresses() const { return addresses_; }
  server::Shard& shard(int i) { return *shards_[i]; }

 private:
  std::vector<std::unique_ptr<server::Shard>> shards_;
  std::vector<std::string> addresses_;
};

class ClusterTest : public ::testing::Test {
 protected:
  // `n` shards started from `options` (shard_index and num_shards set).
  void StartShards(int n, server::ShardOptions options = {}) {
    cluster_.Start(n, options);
    addresses_ = cluster_.addresses();
  }

  // A client of every shard; a test failure (and null) if it cannot be
  // made.
  std::unique_ptr<client::Client> Connect(
      proto::ValueType wire = proto::FLOAT32,
      absl::Duration retry_deadline = absl::Seconds(5),
      int channels_per_shard = 1) {
    client::ClientOptions options;
    options.servers = addresses_;
    options.wire_type = wire;
    options.retry.retry_deadline = retry_deadline;
    options.channels_per_shard = channels_per_shard;
    absl::StatusOr<std::unique_ptr<client::Client>> client =
        client::Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  InProcessCluster cluster_;
  std::vector<std::string> addresses_;
};

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_IN_PROCESS_CLUSTER_H_
