// Replicator: one replica's part in a replicated training shard.
//
// Each replica heartbeats the shard's directory (directory_client.h: the
// coordinator's ReplicaDirectory, replica_directory.h, or the same rules
// kept in etcd) and takes the role its view gives it:
// - primary: takes every write (Push, CreateTable, DropTable) in one order
//   (Write: applied here, numbered, forwarded to every backup in that
//   order) and acknowledges it once every in-sync backup has applied it; a
//   backup that fails is reported to the directory first. It writes only
//   while its lease lasts.
// - backup: applies what the primary forwards (Apply), strictly in
//   sequence, feeding the exactly-once log so that a client's retry after a
//   failover is recognised.
// - joining: a replica the directory does not count in sync (a new or
//   restarted process) fetches the primary's state (CatchUp: tables, rows,
//   SYNC/SSP progress, the exactly-once log, at one sequence) while
//   training goes on; the writes after that sequence follow by Apply, and
//   the primary reports it in sync once it has them all.
// - deposed: a replica that lost its place (a primary whose lease ran out,
//   a backup dropped from the in-sync set, a failed catch-up) refuses every
//   write and calls `on_deposed`; ps_server exits then, so that its
//   supervisor restarts it empty to join again (fail-stop).
// Pulls are served by the primary only (CheckServes). It is the shard's
// WriteOrder (write_order.h) for the training service. Design and why:
// docs/architecture.md "Replication".
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_SERVER_REPLICATOR_H_
#define EMBEDPS_SERVER_REPLICATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/replication.grpc.pb.h"
#include "security/credentials.h"
#include "server/checkpointer.h"
#include "server/directory_client.h"
#include "server/memory_guard.h"
#include "server/push_deduplicator.h"
#include "server/replica_sender.h"
#include "server/rpc_metrics.h"
#include "server/table_registry.h"
#include "server/write_order.h"

namespace embedps::server {

struct ReplicationOptions {
  // The shard this replica belongs to.
  int32_t shard = 0;
  // This replica's address as clients and the other replicas reach it
  // (may be left empty until Run).
  std::string member;
  // The ReplicaDirectory's address (the coordinator), or
  std::string directory;
  // etcd's endpoints ("etcd://host:port,..." or "etcds://..."): the
  // directory's rules kept in etcd (etcd_directory_client.h). One of the
  // two is required.
  std::string control_plane;
  // The cluster's id: its shards' keys in etcd (ps_server --cluster_id).
  std::string cluster_id;
  // Is this a replica of a replicated shard (a directory or etcd given)?
  bool replicated() const {
    return !directory.empty() || !control_plane.empty();
  }
  // TLS and token of the channels to the directory and the other replicas
  // (for etcds://, its CA and client certificate too).
  security::ChannelSecurity security;
  // How long a forward to a backup may take, beyond twice the primary's
  // own time applying the writes it carries, before the backup counts as
  // failed. Default: 2 s.
  absl::Duration forward_timeout = absl::Seconds(2);
  // Bytes of writes one Apply may carry. Default: 32 MiB.
  size_t max_apply_bytes = size_t{32} << 20;
  // Called once, on a thread of the replicator, when this replica must
  // restart to take part again (why: the reason). Default: logs only.
  std::function<void(const std::string& why)> on_deposed;
};

class Replicator final : public WriteOrder {
 public:
  // Applies a write the primary forwarded (the training service: it parses
  // and checks it as it would a client's).
  using ApplyForwarded =
      std::function<absl::Status(const proto::ReplicatedOp& op)>;

  // `registry`, `deduplicator`, `checkpointer`, `metrics` and `memory`
  // must outlive the replicator. It takes no part until Run. `memory`
  // (null: no limit): the process's limit (ps_server --memory_limit_mb); a
  // catch-up whose rows would take the process past it stops there, and
  // the replica leaves (on_deposed) rather than grow past its limit.
  static absl::StatusOr<std::unique_ptr<Replicator>> Create(
      ReplicationOptions options, TableRegistry* registry,
      PushDeduplicator* deduplicator, ShardCheckpointer* checkpointer,
      RpcMetrics* metrics, MemoryGuard* memory, ApplyForwarded apply_forwarded);
  // Starts heartbeating as `member` (empty: options.member). Once.
  void Run(const std::string& member = "");
  // Stops the threads; forwards in flight fail.
  ~Replicator() override;
  Replicator(const Replicator&) = delete;
  Replicator& operator=(const Replicator&) = delete;

  // The primary's write: runs `apply` in the shard's write order and, if it
  // succeeded, forwards make_op() to the backups and returns once every
  // in-sync one has applied it. UNAVAILABLE (nothing applied) on a replica
  // that is not the primary or whose lease ran out; UNAVAILABLE after
  // `apply` if a failed backup could not be reported (this replica is
  // deposed then). On OK, *epoch (if given) is the epoch in which this
  // replica accepted the write as the primary.
  absl::Status Write(absl::FunctionRef<proto::ReplicatedOp()> make_op,
                     absl::FunctionRef<absl::Status()> apply,
                     uint64_t* epoch = nullptr) override;

  // OK on the primary within its lease; UNAVAILABLE naming the primary
  // otherwise (the client tries the shard's other replicas).
  absl::Status CheckServes() override;

  // FAILED_PRECONDITION: a replicated shard restores with --restore.
  absl::Status CheckLoad() override;

  // The shard's lineage in hex (empty until known): every replica answers
  // as it, so that a failover is the same shard to clients.
  std::string Incarnation() override;

  // The shard's lineage (0 until known).
  uint64_t lineage();

  // The Replication service's methods.
  grpc::Status Apply(const proto::ApplyRequest& request,
                     proto::ApplyResponse* response);
  grpc::Status CatchUp(const proto::CatchUpRequest& request,
                       grpc::ServerWriter<proto::CatchUpChunk>* writer);

  // For Stats and tests: "primary", "backup", "joining", "deposed" or
  // "starting"; the epoch; the last sequence applied.
  std::string role();
  uint64_t epoch();
  uint64_t applied_sequence();

 private:
  enum class Role { kStarting, kJoining, kBackup, kPrimary, kDeposed };

  Replicator(ReplicationOptions options, TableRegistry* registry,
             PushDeduplicator* deduplicator, ShardCheckpointer* checkpointer,
             RpcMetrics* metrics, MemoryGuard* memory,
             ApplyForwarded apply_forwarded);
  void HeartbeatLoop();
  void OnView(const proto::ReplicaView& view, absl::Time sent);
  void CatchUpLoop(proto::ReplicaView view);
  absl::Status FetchState(const proto::ReplicaView& view, uint64_t* sequence,
                          uint64_t* lineage);
  // Removes a failed backup; OK once the directory recorded it.
  absl::Status ReportFailed(const std::string& member);
  void Depose(const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  ReplicationOptions options_;  // constant once Run
  TableRegistry* const registry_;
  PushDeduplicator* const deduplicator_;
  ShardCheckpointer* const checkpointer_;
  RpcMetrics* const metrics_;
  const ApplyForwarded apply_forwarded_;
  const uint64_t incarnation_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::unique_ptr<DirectoryClient> directory_;  // set by Create
  // A catch-up's rows are admitted against it (null: no limit).
  MemoryGuard* const memory_;

  // Held while a write is applied and numbered (primary) or applied
  // (backup): the order every replica applies writes in.
  Mutex write_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t last_sequence_ ABSL_GUARDED_BY(write_mu_) = 0;

  Mutex mu_;
  CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  Role role_ ABSL_GUARDED_BY(mu_) = Role::kStarting;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lineage_ ABSL_GUARDED_BY(mu_) = 0;
  std::string primary_ ABSL_GUARDED_BY(mu_);
  proto::ReplicaView latest_view_ ABSL_GUARDED_BY(mu_);
  // A backup that has been in the in-sync set (until then it is catching
  // up, and its absence from the set means nothing).
  bool counted_in_sync_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time lease_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::Seconds(2);
  // Primary: a sender per backup (in sync, or catching up).
  absl::flat_hash_map<std::string, std::shared_ptr<ReplicaSender>> senders_
      ABSL_GUARDED_BY(mu_);
  Mutex report_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  std::thread heartbeat_;
  std::thread catch_up_;
};

// The gRPC face of a Replicator.
class ReplicationServiceImpl final : public proto::Replication::Service {
 public:
  // `replicator` and `metrics` must outlive the service.
  ReplicationServiceImpl(Replicator* replicator, RpcMetrics* metrics)
      : replicator_(replicator), metrics_(metrics) {}

  grpc::Status Apply(grpc::ServerContext* context,
                     const proto::ApplyRequest* request,
                     proto::ApplyResponse* response) override;
  grpc::Status CatchUp(
      grpc::ServerContext* context, const proto::CatchUpRequest* request,
      grpc::ServerWriter<proto::CatchUpChunk>* writer) override;

 private:
  Replicator* const replicator_;
  RpcMetrics* const metrics_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_REPLICATOR_H_
