// DirectoryClient: how a replica of a replicated training shard reaches
// the shard's directory — the rules of replica_directory.h, kept either by
// the built-in coordinator (GrpcDirectoryClient: ps_server
// --role=coordinator) or by etcd (EtcdDirectoryClient,
// etcd_directory_client.h). The Replicator sees only this.
//
// Thread safety: implementations are thread-safe.
#ifndef EMBEDPS_SERVER_DIRECTORY_CLIENT_H_
#define EMBEDPS_SERVER_DIRECTORY_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"

namespace embedps::server {

class DirectoryClient {
 public:
  virtual ~DirectoryClient() = default;

  // This replica is alive (as request.incarnation()); the shard's view
  // after the directory applied its rules. A primary may write until
  // `lease_ms` after it *called* Heartbeat, and only if the view still
  // names it in the same epoch.
  virtual absl::StatusOr<proto::ReplicaView> Heartbeat(
      const proto::HeartbeatRequest& request, absl::Time deadline) = 0;
  // The primary of report.epoch() records a backup FAILED or IN_SYNC.
  // FAILED_PRECONDITION when the reporter is not that primary; NOT_FOUND
  // for a subject the directory never knew.
  virtual absl::StatusOr<proto::ReplicaView> Report(
      const proto::ReplicaReport& report, absl::Time deadline) = 0;
  // For messages: "the replica directory at HOST:PORT", "etcd ...".
  virtual std::string Describe() const = 0;
};

// The coordinator's ReplicaDirectory service over `channel`.
std::unique_ptr<DirectoryClient> NewGrpcDirectoryClient(
    std::string address, std::shared_ptr<grpc::Channel> channel);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_DIRECTORY_CLIENT_H_
