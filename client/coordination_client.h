// CoordinationClient: the rendezvous store of a running cluster (the
// Coordination service of one ps_server, shard 0 by convention), for
// workers to publish and find addresses, NCCL ids and the like, and to
// meet at barriers.
//
// Calls retry UNAVAILABLE (the server starting or restarting) until
// `connect_deadline`; Wait and Barrier also fail with DEADLINE_EXCEEDED
// when their own timeout passes.
// Thread safety: thread-safe.
#ifndef EMBEDPS_CLIENT_COORDINATION_CLIENT_H_
#define EMBEDPS_CLIENT_COORDINATION_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/coordination.grpc.pb.h"
#include "security/credentials.h"

namespace embedps::client {

class CoordinationClient {
 public:
  // `address` is "host:port" of the server hosting the store, reached
  // with `security` (security/credentials.h; its error if its files
  // cannot be used).
  static absl::StatusOr<std::unique_ptr<CoordinationClient>> Create(
      const std::string& address,
      const security::ChannelSecurity& security = {},
      absl::Duration connect_deadline = absl::Seconds(60));

  absl::Status Set(const std::string& key, const std::string& value);
  absl::StatusOr<std::string> Get(const std::string& key);
  absl::StatusOr<std::vector<std::string>> Wait(
      const std::vector<std::string>& keys, absl::Duration timeout);
  // Returns the barrier's generation once `participants` callers arrived.
  absl::StatusOr<uint64_t> Barrier(const std::string& name,
                                   uint32_t participants,
                                   absl::Duration timeout);

 private:
  CoordinationClient(std::unique_ptr<proto::Coordination::Stub> stub,
                     absl::Duration connect_deadline)
      : stub_(std::move(stub)), connect_deadline_(connect_deadline) {}

  template <typename Rpc>
  absl::Status Call(absl::Duration timeout, Rpc&& rpc);

  std::unique_ptr<proto::Coordination::Stub> stub_;
  const absl::Duration connect_deadline_;
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_COORDINATION_CLIENT_H_
