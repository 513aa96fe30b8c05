// ServingClient: the C++ library an online service uses to read embeddings
// from serving replicas (ps_server --role=serving).
//
// A Lookup is a batch of slots — a table, keys, bag offsets, a pooling —
// answered as pooled vectors. Without the cache, each serving shard pools
// its own keys of every bag, so a bag comes back as one vector (several
// shards: partial sums, added here), not as its rows. With the cache, the
// client finds each distinct key's row (in the cache, else as a row from
// the replica of the key's serving shard) and pools the bags itself. Each
// serving shard has one or more replicas: requests are spread over them
// in turn; a replica that fails (UNAVAILABLE, or an attempt past its
// timeout) is skipped for `down_for` and the request goes to the next
// one, until the request's deadline; a replica that comes back is used
// again after that. A Lookup that needs one shard runs on the caller's
// thread; one that needs several asks them at once.
//
// The hot-key cache (optional) keeps recently read rows, least recently
// used out first, each for at most `cache_ttl`: a row may be that much
// older than the replicas' version. Lookups of an exact version bypass it.
//
// Thread safety: thread-safe; many request threads may share one client.
// Do not call it from a gRPC callback thread.
#ifndef EMBEDPS_CLIENT_SERVING_CLIENT_H_
#define EMBEDPS_CLIENT_SERVING_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/serving.pb.h"
#include "proto/tables.pb.h"
#include "security/credentials.h"

namespace embedps::client {

struct ServingClientOptions {
  // replicas[s]: "host:port" of every replica of serving shard s (shard
  // count = replicas.size()). Required.
  std::vector<std::vector<std::string>> replicas;
  // A Lookup fails with DEADLINE_EXCEEDED after this. Default: 50 ms.
  absl::Duration deadline = absl::Milliseconds(50);
  // One attempt on one replica gives up after this (then the next replica
  // is tried, within the deadline). Default: 20 ms.
  absl::Duration attempt_timeout = absl::Milliseconds(20);
  // A replica that failed is not tried again before this. Default: 500 ms.
  absl::Duration down_for = absl::Milliseconds(500);
  // Hot-key cache: rows kept (0: none) and how long each may be used.
  // Defaults: 0, 1 s.
  size_t cache_rows = 0;
  absl::Duration cache_ttl = absl::Seconds(1);
  // Encoding of rows on the wire. Default: FLOAT32.
  proto::ValueType wire_type = proto::FLOAT32;
  // TLS and the token calls carry (security/credentials.h). Default:
  // plain text.
  security::ChannelSecurity security;
  // The cluster every replica must state it belongs to (StatsService.
  // Identify); empty: the one the first replica to answer states.
  std::string cluster_id;
  // How long Connect waits for the replicas to state their identities.
  // Default: 2 s.
  absl::Duration identify_timeout = absl::Seconds(2);
};

// One slot of a Lookup. The spans are borrowed for the call.
struct ServingSlot {
  std::string table;
  int32_t dim = 0;
  absl::Span<const uint64_t> keys;
  // bags + 1 non-decreasing entries from 0 to keys.size(); empty: one key
  // a bag.
  absl::Span<const int32_t> offsets;
  proto::Pooling pooling = proto::POOLING_SUM;
};

struct ServingClientStats {
  uint64_t lookups = 0;
  uint64_t cache_hits = 0;    // distinct keys found in the cache
  uint64_t cache_misses = 0;  // distinct keys not found there
  uint64_t failovers = 0;     // attempts moved to another replica
  uint64_t failed = 0;        // lookups that failed
};

// Each replica must state that it is a serving replica of the shard it is
// listed for, of the cluster (client/identity_check.h), before a Lookup is
// sent to it: Connect asks every replica; one that answers otherwise fails
// Connect with FAILED_PRECONDITION naming it; one that does not answer yet
// is asked again in the background (every down_for) and serves no Lookup
// until it has answered (a shard with no such replica fails with
// UNAVAILABLE saying so).
class ServingClient {
 public:
  // INVALID_ARGUMENT for options that cannot work; FAILED_PRECONDITION for
  // a replica that is not what its position says.
  static absl::StatusOr<std::unique_ptr<ServingClient>> Connect(
      ServingClientOptions options);
  ~ServingClient();

  // Pooled vectors of every slot: out[s] gets bags × dim floats (NONE:
  // keys × dim). `version` 0: the latest each replica serves; otherwise
  // that exact training step on every shard (no cache). On success
  // *served_version (if given) is the least version that answered.
  // INVALID_ARGUMENT for bad slots (before anything is sent); otherwise
  // the replicas' error, or DEADLINE_EXCEEDED naming the shard.
  absl::Status Lookup(absl::Span<const ServingSlot> slots,
                      std::vector<std::vector<float>>* out,
                      uint64_t version = 0, uint64_t* served_version = nullptr);

  // The serving shard of `key`.
  int32_t ShardOf(uint64_t key) const;

  // The version every replica serves, by shard then replica (0 for one
  // that does not answer).
  std::vector<std::vector<proto::ServingVersionResponse>> Versions();

  ServingClientStats stats() const;

 private:
  struct Impl;
  explicit ServingClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_SERVING_CLIENT_H_
