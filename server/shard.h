// Shard: one running ps_server process, assembled for its role from its
// parts. Every role serves StatsService, the gRPC health and reflection
// services and, if asked, the Prometheus /metrics page; besides:
// - training: the table registry, the checkpointer, the publisher,
//   TrainingService, Coordination, and for a replicated shard its
//   Replicator and ReplicationService (training_service.h, replicator.h);
// - serving: a Follower of training's checkpoints and publications and
//   ServingService (follower.h, serving_service.h);
// - coordinator: the ReplicaDirectory of replicated shards
//   (replica_directory.h) and Coordination, the rendezvous store of a
//   cluster whose shards are replicated.
// A method the role does not serve is refused with FAILED_PRECONDITION
// naming the role (role_refusal.h).
//
// ps_server's main maps its flags to ShardOptions and calls Start; tests
// start shards in process on 127.0.0.1:0 the same way, so the client, the
// services and the registry are tested without spawning processes
// (process tests remain for crashes, signals and restarts).
//
// Thread safety: Shutdown and Wait may be called from any thread; the
// accessors are constant after Start.
#ifndef EMBEDPS_SERVER_SHARD_H_
#define EMBEDPS_SERVER_SHARD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/stats.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.pb.h"
#include "security/credentials.h"
#include "server/coordination_store.h"
#include "server/follower.h"
#include "server/publisher.h"
#include "server/replica_directory.h"
#include "server/replicator.h"
#include "server/training_service.h"

namespace embedps::server {

enum class ShardRole {
  // A shard of the training cluster.
  kTraining,
  // A read-only replica of a serving shard that follows training.
  kServing,
  // The replica directory of replicated training shards.
  kCoordinator,
};

struct ShardOptions {
  // What the process is. Default: a training shard.
  ShardRole role = ShardRole::kTraining;
  // The cluster it belongs to, stated to clients (StatsService.Identify),
  // which refuse servers of another cluster: at most 128 letters, digits,
  // '-', '_' or '.'. Default: "" (none).
  std::string cluster_id;
  // Address to listen on. Default: 127.0.0.1 (loopback only).
  std::string host = "127.0.0.1";
  // 0 picks a free port (see Shard::port()). Default: 0.
  int port = 0;
  // Which shard, limits, test hooks (a serving replica's shard is
  // follow's). Default: shard 0 of 1.
  TrainingServiceOptions service;
  // Workers the SYNC and SSP modes wait for. Default: 1.
  int32_t num_workers = 1;
  // Threads a completed SYNC step of many keys is applied on (pieces of
  // at least StepSynchronizer::kKeysPerApplyThread keys). Default: 1.
  int32_t sync_apply_threads = 1;
  // Local directory of this shard's spill tiers (emptied at start); empty:
  // memory budgets are only reported. Default: empty.
  std::string spill_root;
  // RocksDB block cache of each spill tier. Default: 64 MiB.
  uint64_t spill_block_cache_bytes = uint64_t{64} << 20;
  // embedding::TableOptions::spill_read_around. Default: false.
  bool spill_read_around = false;
  // The most memory one table's expected_rows may commit on this shard
  // (TableRegistry::Options). Default: 8 GiB.
  uint64_t max_expected_rows_bytes = uint64_t{8} << 30;
  // How often a training shard removes the expired rows of its tables with
  // a TTL (expiry_sweeper.h); zero: never. Default: 10 s.
  absl::Duration ttl_sweep_interval = absl::Seconds(10);
  // Tables created before the shard serves. Default: none.
  proto::TableConfigList tables;
  // A checkpoint (directory, or a root: its latest complete checkpoint) to
  // restore before serving. Default: none.
  std::string restore;
  // Where checkpoints may be written and read (Save, Load, `restore`, and
  // the files their manifests name): paths elsewhere are refused with
  // PERMISSION_DENIED. Empty: Save and Load requests are refused
  // (FAILED_PRECONDITION); `restore` may name any path. Default: empty.
  std::string checkpoint_root;
  // Shard 0 of a training job: after writing its files of each checkpoint,
  // deletes all but the `keep_checkpoints` newest complete checkpoints of
  // that checkpoint's root (and what their chains need;
  // checkpoint/retention.h). 0: keep all. For clients that do not prune
  // themselves (WorkerConfig.keep_checkpoints, CheckpointOptions.keep):
  // set one or the other. Default: 0.
  int keep_checkpoints = 0;
  // Largest gRPC message accepted or sent. Default: 1 GiB.
  int max_message_bytes = 1 << 30;
  // Port of the Prometheus page: 0 picks one, -1 none. Default: -1.
  int metrics_port = -1;
  // Address of the Prometheus page (plain HTTP, read-only: it serves
  // /metrics and nothing else). Default: empty, `host`.
  std::string metrics_host;
  // TLS and tokens of the gRPC port (security/credentials.h). Default:
  // plain text, no tokens.
  security::ServerSecurity security;
  // A training shard's publications to serving replicas (publisher.h).
  PublisherOptions publisher;
  // kServing: what the replica follows (follower.h: follow.checkpoint_root
  // is required; follow's shard is this replica's serving shard).
  FollowerOptions follow;
  // kServing: etcd's endpoints (etcd://h:p,... or etcds://); set, the
  // training shards' primaries are found there (their keys under
  // cluster_id), follow.training_shards of them, in place of
  // follow.training_servers. Default: "" (none).
  std::string follow_control_plane;
  // Keys one serving Lookup may carry. Default: 1 Mi.
  uint64_t max_lookup_keys = uint64_t{1} << 20;
  // What the Coordination store may hold. Default: see CoordinationLimits.
  CoordinationLimits coordination;
  // A replica of a replicated training shard when replication.directory is
  // set (replicator.h; replication.shard is set from `service`, and an
  // empty replication.member is this shard's address()). Default: not
  // replicated.
  ReplicationOptions replication;
  // kCoordinator: the directory's leases (replica_directory.h).
  ReplicaDirectoryOptions directory;
};

class Shard {
 public:
  // Assembles the role's parts (a training shard creates its tables and
  // restores first) and starts serving. INVALID_ARGUMENT for options that
  // cannot work (naming the field), the error of a table, a restore or the
  // follower's start, UNAVAILABLE if the ports cannot be bound.
  static absl::StatusOr<std::unique_ptr<Shard>> Start(ShardOptions options);

  // Shutdown(zero grace), then waits.
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // The bound gRPC port and "host:port".
  int port() const;
  std::string address() const;
  // The bound /metrics port, or -1.
  int metrics_port() const;
  // What --restore restored (empty name if nothing).
  const proto::LoadResponse& restored() const;
  // A training shard's tables (0 for the other roles).
  int num_tables() const;

  // Stops taking calls; calls in flight get until now + `grace` to finish,
  // then are cancelled. Idempotent.
  void Shutdown(absl::Duration grace = absl::ZeroDuration());
  // Returns once the shard is shut down.
  void Wait();

  // The Stats RPC's answer for every table, not counted as a call.
  proto::StatsResponse CollectStats();

  // Null unless replicated.
  Replicator* replicator();

 private:
  struct Parts;
  explicit Shard(std::unique_ptr<Parts> parts);
  std::unique_ptr<Parts> parts_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_SHARD_H_
