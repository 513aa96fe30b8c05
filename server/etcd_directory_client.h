// EtcdDirectoryClient: the replica directory's rules (replica_directory.h)
// kept in etcd instead of one coordinator process, so that no single
// process of ours decides who writes.
//
// Keys, under /embedps/<cluster>/shards/<shard>/:
// - members/<address>: {"incarnation"} of each live replica, bound to that
//   replica's etcd lease (TTL = the lease, kept alive by each Heartbeat):
//   etcd deletes it when the replica stops renewing.
// - primary: {"member", "incarnation", "lineage"}. Its mod_revision is the
//   shard's epoch: every change of primary is a new etcd revision, so
//   epochs only grow and no two primaries share one.
// - in_sync: [{"member", "incarnation"}...], the replicas holding every
//   acknowledged write.
// Every change is a transaction conditioned on the revisions the replica
// read (primary, in_sync, and the members it judged), so replicas that
// act on the same view race safely: one wins, the others read again.
//
// The rules, as the coordinator's: the first replica of a shard becomes
// its primary (a new lineage); when the primary's member key is gone (its
// lease expired) or names another incarnation (it restarted), the live
// in-sync replica with the least address takes over (epoch = that write's
// revision); with none, the shard waits (a restarted primary with none
// starts a new lineage). A restarted replica leaves in_sync. Only the
// primary of the current epoch reports backups FAILED or IN_SYNC.
//
// Why a primary never overlaps its successor: it writes until `ttl` after
// it *sent* the keepalive that renewed its lease, and etcd deletes its key
// no sooner than `ttl` after it *received* that keepalive; a successor's
// transaction requires that key to be gone (or the primary's lease to be
// another incarnation's).
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_SERVER_ETCD_DIRECTORY_CLIENT_H_
#define EMBEDPS_SERVER_ETCD_DIRECTORY_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "control/etcd_client.h"
#include "server/directory_client.h"

namespace embedps::server {

struct EtcdDirectoryOptions {
  // The cluster's id (ps_server --cluster_id; "" reads as "default"):
  // shards of different clusters never meet in one etcd.
  std::string cluster_id;
  // The replica's lease. etcd grants whole seconds (and at least its own
  // minimum, ~2 s with default election timing). Default: 2 s.
  absl::Duration lease = absl::Seconds(2);
};

class EtcdDirectoryClient final : public DirectoryClient {
 public:
  EtcdDirectoryClient(std::unique_ptr<control::EtcdClient> etcd,
                      EtcdDirectoryOptions options);
  // Over a new client of `etcd` (endpoints, TLS): EtcdClient::Create's
  // errors.
  static absl::StatusOr<std::unique_ptr<EtcdDirectoryClient>> Connect(
      control::EtcdOptions etcd, EtcdDirectoryOptions options);

  absl::StatusOr<proto::ReplicaView> Heartbeat(
      const proto::HeartbeatRequest& request, absl::Time deadline) override;
  absl::StatusOr<proto::ReplicaView> Report(const proto::ReplicaReport& report,
                                            absl::Time deadline) override;
  std::string Describe() const override;

  // The shard's view as etcd holds it, changing nothing (tools, tests).
  // NOT_FOUND for a shard no replica ever joined.
  absl::StatusOr<proto::ReplicaView> View(int32_t shard);

  // The prefix of `shard`'s keys.
  std::string ShardPrefix(int32_t shard) const;

 private:
  struct State;
  absl::StatusOr<State> Read(int32_t shard);
  // Renews (or grants) this replica's lease and writes its member key.
  absl::StatusOr<int64_t> KeepLease(const proto::HeartbeatRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::unique_ptr<control::EtcdClient> etcd_;
  const EtcdDirectoryOptions options_;
  Mutex mu_;  // serializes heartbeats (the lease)
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t ttl_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t member_incarnation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_ETCD_DIRECTORY_CLIENT_H_
