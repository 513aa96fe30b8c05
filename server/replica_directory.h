// ReplicaDirectory: who holds each replicated shard, and who may write.
//
// Runs on the coordinator (ps_server --role=coordinator). Every replica of
// a replicated training shard sends it a heartbeat a few times per lease;
// the answer is the shard's view (ReplicaView in proto/replication.proto):
// the epoch, the primary, the replicas in sync, the lineage.
//
// The rules (docs/architecture.md "Replication" says why):
// - The first replica heard from for a shard becomes its primary, epoch 1,
//   a new lineage; every other replica starts out of sync and catches up
//   from the primary, which reports it IN_SYNC when it is.
// - A primary not heard from for lease + grace (or heard from as a new
//   process: another incarnation at its address) is replaced by an
//   in-sync replica that was heard from within the lease: epoch + 1, and
//   the new primary is the only one in sync (the others may have missed a
//   write the old primary forwarded to some of them only: they catch up).
//   The primary's own lease ends `lease` after it *sent* the heartbeat the
//   directory answered, so it stops writing before the directory can
//   choose another (no split brain while clocks run at similar rates).
// - With no in-sync replica left alive, the shard waits for one; a replica
//   that joins a shard with neither starts a new lineage (its data is lost,
//   and clients see a new incarnation).
// - Only the primary of the current epoch may report a replica FAILED
//   (removed from in_sync; the primary acknowledges no write before this)
//   or IN_SYNC.
//
// Thread safety: thread-safe. The clock is injectable for tests.
#ifndef EMBEDPS_SERVER_REPLICA_DIRECTORY_H_
#define EMBEDPS_SERVER_REPLICA_DIRECTORY_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/replication.grpc.pb.h"
#include "server/rpc_metrics.h"

namespace embedps::server {

struct ReplicaDirectoryOptions {
  // How long a primary may write after a heartbeat. Default: 2 s.
  absl::Duration lease = absl::Seconds(2);
  // How much longer the directory waits before choosing another primary.
  // Default: 1 s.
  absl::Duration grace = absl::Seconds(1);
  // Shards a directory tracks (bounds its memory). Default: 4096.
  int32_t max_shards = 4096;
  // Replicas per shard. Default: 16.
  int32_t max_members = 16;
  std::function<absl::Time()> clock = [] { return absl::Now(); };
};

class ReplicaDirectory {
 public:
  explicit ReplicaDirectory(ReplicaDirectoryOptions options = {});

  // INVALID_ARGUMENT for a negative shard, an empty member or incarnation 0;
  // RESOURCE_EXHAUSTED past the limits.
  absl::StatusOr<proto::ReplicaView> Heartbeat(
      const proto::HeartbeatRequest& request);
  // FAILED_PRECONDITION unless the reporter is the primary of that epoch;
  // NOT_FOUND for a subject the directory does not know.
  absl::StatusOr<proto::ReplicaView> Report(const proto::ReplicaReport& report);
  // NOT_FOUND for a shard never heard from.
  absl::StatusOr<proto::ReplicaView> View(int32_t shard);

 private:
  struct Member {
    uint64_t incarnation = 0;
    absl::Time last_heard;
  };
  struct Shard {
    proto::ReplicaView view;
    absl::flat_hash_map<std::string, Member> members;
  };
  // Replaces a primary that is gone, if one can be. REQUIRES: mu_ held.
  void MaybeFailOver(Shard& shard, absl::Time now, bool primary_restarted)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MakePrimary(Shard& shard, const std::string& member, bool new_lineage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ReplicaDirectoryOptions options_;
  Mutex mu_;
  absl::flat_hash_map<int32_t, Shard> shards_ ABSL_GUARDED_BY(mu_);
};

// The gRPC face of a ReplicaDirectory.
class ReplicaDirectoryServiceImpl final
    : public proto::ReplicaDirectory::Service {
 public:
  // `directory` and `metrics` must outlive the service.
  ReplicaDirectoryServiceImpl(ReplicaDirectory* directory, RpcMetrics* metrics)
      : directory_(directory), metrics_(metrics) {}

  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const proto::HeartbeatRequest* request,
                         proto::HeartbeatResponse* response) override;
  grpc::Status Report(grpc::ServerContext* context,
                      const proto::ReplicaReport* request,
                      proto::ReplicaReportResponse* response) override;
  grpc::Status View(grpc::ServerContext* context,
                    const proto::ReplicaViewRequest* request,
                    proto::ReplicaView* response) override;

 private:
  ReplicaDirectory* const directory_;
  RpcMetrics* const metrics_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_REPLICA_DIRECTORY_H_
