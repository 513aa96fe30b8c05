// Test helper: shards of one cluster, in this process, on 127.0.0.1:0.
#ifndef EMBEDPS_SERVER_SHARD_TESTING_H_
#define EMBEDPS_SERVER_SHARD_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/shard.h"

namespace embedps::server::testing {

// `n` shards of one cluster, each started from `options` with its
// shard_index and num_shards set.
class InProcessCluster {
 public:
  void Start(int n, const ShardOptions& options = {}) {
    for (int i = 0; i < n; ++i) {
      ShardOptions o = options;
      o.service.shard_index = i;
      o.service.num_shards = n;
      absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Start(o);
      ASSERT_TRUE(shard.ok()) << shard.status();
      addresses_.push_back((*shard)->address());
      shards_.push_back(*std::move(shard));
    }
  }
  const std::vector<std::string>& addresses() const { return addresses_; }
  Shard& shard(int i) { return *shards_[i]; }

 private:
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::string> addresses_;
};

}  // namespace embedps::server::testing

#endif  // EMBEDPS_SERVER_SHARD_TESTING_H_
