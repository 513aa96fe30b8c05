// Whether the servers a client was given are the cluster it was told: each
// server states its identity (StatsService.Identify: cluster id, role,
// shard index and count), and a client refuses, before any call that reads
// or changes tables, servers whose identities do not match their
// positions — a duplicate shard, a wrong shard count, shards out of order,
// a shard of another cluster, a server of another role (a serving replica
// given as a training shard).
//
// Thread safety: pure functions.
#ifndef EMBEDPS_CLIENT_IDENTITY_CHECK_H_
#define EMBEDPS_CLIENT_IDENTITY_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "proto/stats.pb.h"

namespace embedps::client {

// "training shard 0 of 2 of cluster 'a'" (or "of no named cluster").
std::string DescribeIdentity(const proto::ServerIdentity& identity);

// One position of the client's list: the address(es) given there and what
// the server that answered said.
struct StatedIdentity {
  std::string address;
  proto::ServerIdentity identity;
};

// OK if every position i of `stated` (the client's list, in shard order)
// holds a server of `role` that says it is shard i of stated.size(), all of
// one cluster — `cluster_id` when it is not empty. Otherwise
// FAILED_PRECONDITION naming the position, its address and what it said,
// and, where another position is involved (a duplicate shard index, a
// different cluster), that one's address and what it said too.
absl::Status CheckIdentities(absl::Span<const StatedIdentity> stated,
                             proto::ServerIdentity::Role role,
                             const std::string& cluster_id);

// OK if the replica at `stated.address`, listed for serving shard `shard`
// of `shards`, says it is exactly that, of cluster `cluster_id`;
// otherwise FAILED_PRECONDITION naming the address, what it said and what
// was expected. (A serving client checks each replica on its own: some
// may be down when it connects.)
absl::Status CheckServingReplica(const StatedIdentity& stated, int32_t shard,
                                 int32_t shards, const std::string& cluster_id);

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_IDENTITY_CHECK_H_
