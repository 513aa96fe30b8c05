// Follower: keeps a serving replica's tables up with training.
//
// Two channels (docs/architecture.md, "Serving"):
//  - checkpoints under a root: at start the latest complete one is
//    restored into this replica's serving shard (any training shard count)
//    as the base; later, a newer complete checkpoint that is also newer
//    than what the replica serves (its stream broke, or it has none) is
//    restored aside into fresh tables and swapped in whole;
//  - publications of the training shards (Subscribe): each becomes one
//    overlay per table on top of the current version, swapped in whole, so
//    the replica trails training by a publication interval.
// A publication is applied only if the replica's stream has no gap: the
// first publication a fresh subscription receives must start its change
// interval (Publication.previous_step) at or before the base's step. Otherwise
// the follower waits for a checkpoint at least as new as that publication,
// loads it, and subscribes afresh. Publications at or before the base's step
// are skipped (the checkpoint holds newer values). A checkpoint that cannot be
// read leaves the current version serving and is reported (last_error).
//
// The current version and the few before it (for Predict, which reads
// every serving shard at one step) are retained; requests read a version
// they hold, never a half-applied one (serving_state.h).
//
// Thread safety: thread-safe. One thread per training shard reads its
// stream, one polls the checkpoint root; version swaps are serialized.
#ifndef EMBEDPS_SERVER_FOLLOWER_H_
#define EMBEDPS_SERVER_FOLLOWER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "common/mutex.h"
#include "proto/serving.pb.h"
#include "proto/training.pb.h"
#include "security/credentials.h"
#include "server/serving_state.h"

namespace embedps::server {

struct FollowerOptions {
  // Where training writes its checkpoints. Required.
  std::string checkpoint_root;
  // "host:port" of every training shard, in shard order; empty: follow
  // checkpoints only. Default: empty.
  std::vector<std::string> training_servers;
  // Set: the training shards' primaries are found by asking it (ps_server
  // --control_plane: etcd), shard by shard, before each subscription, in
  // place of training_servers (which must then be empty); there are
  // `training_shards` of them. An error (no primary now) is asked again a
  // moment later. Default: unset.
  std::function<absl::StatusOr<std::string>(int32_t shard)> find_primary;
  int32_t training_shards = 0;
  // This replica's serving shard. Defaults: 0 of 1.
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  // How often the root is checked for a newer checkpoint. Default: 5 s.
  absl::Duration checkpoint_poll = absl::Seconds(5);
  // Nonzero: serve the checkpoint of exactly this step and nothing newer
  // (a rollback). Default: 0.
  uint64_t pinned_step = 0;
  // Versions kept answerable by step (and so overlays not yet written
  // into the base). Default: 4.
  size_t retained_versions = 4;
  // A local directory for spill tiers of tables with a memory budget;
  // empty: memory only. Default: empty.
  std::string spill_root;
  // How every table's rows are stored (ps_server --serving_storage); unset:
  // each table's serving.storage.
  std::optional<proto::ServingConfig::Storage> storage;
  // Largest gRPC message from a training shard. Default: 1 GiB.
  int max_message_bytes = 1 << 30;
  // How the training shards are reached (TLS, token). Default: plain text.
  security::ChannelSecurity security;
};

class Follower {
 public:
  // Restores the latest complete checkpoint under the root (or the pinned
  // one) and starts following. NOT_FOUND if there is none; the restore's
  // error (naming the file) if it cannot be read.
  static absl::StatusOr<std::unique_ptr<Follower>> Start(
      FollowerOptions options);
  // Stops following (waits for the threads).
  ~Follower();
  Follower(const Follower&) = delete;
  Follower& operator=(const Follower&) = delete;

  // The version requests read now.
  std::shared_ptr<const ServingVersion> Current() const;

  // The retained version of training step `step`, waiting up to `wait` for
  // it to arrive. FAILED_PRECONDITION if it is older than every retained
  // version (or newer, after the wait).
  absl::StatusOr<std::shared_ptr<const ServingVersion>> AtStep(
      uint64_t step, absl::Duration wait) const;

  // What ServingService.Version and Stats report.
  proto::ServingVersionResponse Describe() const;

  // For tests: applies a publication (all its parts) as a stream would.
  absl::Status TEST_Apply(const std::vector<proto::Publication>& publication);

 private:
  struct Source;
  explicit Follower(FollowerOptions options);
  // Restores `path` into fresh tables (a new registry).
  absl::StatusOr<std::shared_ptr<const ServingVersion>> LoadCheckpoint(
      const std::string& path, std::string* name);
  void PollCheckpoints();
  void FollowStream(size_t source);
  // Points `source` at its shard's primary as find_primary says; false if
  // it cannot say now.
  bool FindPrimary(Source& source);
  // Applies one whole publication; sets *gap if it cannot be applied
  // without a newer checkpoint.
  absl::Status Apply(const std::vector<proto::Publication>& parts,
                     bool first_of_subscription, bool* gap);
  // Makes `version` current and retained. REQUIRES: apply_mu_ held.
  void Install(std::shared_ptr<const ServingVersion> version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  // Writes into the base the overlays of `next` (about to be installed)
  // that every live version on its base holds, and leaves them out of
  // `next` (serving_state.h).
  void FoldIntoBase(ServingVersion& next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(apply_mu_);
  void SetError(std::string error);
  // A checkpoint passed over (bad_checkpoints): logged once, kept among
  // the 16 most recent reports, and last_error until the next install.
  void ReportBadCheckpoint(std::string report);
  // The complete checkpoints under the root, newest first (or the root
  // itself when it is one), listed once per poll; those whose MANIFEST does
  // not read are reported (ReportBadCheckpoint).
  struct Candidates {
    std::vector<checkpoint::CompleteCheckpoint> checkpoints;
    std::vector<std::string> skipped;
    bool root_is_checkpoint = false;
  };
  absl::StatusOr<Candidates> ListCandidates();
  // The newest of `candidates`, if it is newer than `after` and an
  // increment of the served base (its chain passes through the base's
  // checkpoint, every newer file incremental): its changed rows as one
  // overlay per table on the current version, with no second copy of the
  // tables. False if it is not such a checkpoint (the caller loads the
  // newest whole); the error of a file that does not read.
  absl::StatusOr<bool> ApplyNewestIncrement(uint64_t after,
                                            const Candidates& candidates);
  // The newest of `candidates` newer than `after` (0: any) that loads;
  // those that do not are reported and never tried again. NOT_FOUND if
  // there is none (naming what was passed over).
  absl::StatusOr<std::shared_ptr<const ServingVersion>> LoadNewest(
      uint64_t after, const Candidates& candidates, std::string* name);

  const FollowerOptions options_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> loads_{0};
  std::atomic<uint64_t> increments_applied_{0};
  // Bumped when a checkpoint (whole or incremental) becomes the base: the
  // publications of a stream that was ahead of it were applied to the
  // version it replaced, so every stream subscribes afresh and applies
  // what its shard still holds after the base (or waits for a newer
  // checkpoint, when that is gone).
  std::atomic<uint64_t> rebased_{0};
  void ResubscribeAll();

  // Serializes everything that makes a version.
  mutable Mutex apply_mu_;
  uint64_t base_step_ ABSL_GUARDED_BY(apply_mu_) = 0;
  std::string base_name_ ABSL_GUARDED_BY(apply_mu_);
  uint64_t publications_applied_ ABSL_GUARDED_BY(apply_mu_) = 0;
  uint64_t publications_passed_over_ ABSL_GUARDED_BY(apply_mu_) = 0;
  // A stream gap: a checkpoint of at least this step is needed (0: none).
  uint64_t needs_checkpoint_at_ ABSL_GUARDED_BY(apply_mu_) = 0;
  // Every version installed that may still be alive (requests, retained).
  std::vector<std::weak_ptr<const ServingVersion>> made_
      ABSL_GUARDED_BY(apply_mu_);
  std::atomic<uint64_t> sequence_{0};

  mutable Mutex mu_;
  mutable CondVar changed_;
  std::shared_ptr<const ServingVersion> current_ ABSL_GUARDED_BY(mu_);
  std::deque<std::shared_ptr<const ServingVersion>> retained_
      ABSL_GUARDED_BY(mu_);
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> bad_checkpoints_ ABSL_GUARDED_BY(mu_);
  // Checkpoint directories that failed to load (LoadNewest's caller: Start,
  // then the poll thread).
  absl::flat_hash_set<std::string> failed_dirs_;

  Mutex stop_mu_;
  CondVar stop_cv_;
  std::vector<std::unique_ptr<Source>> sources_;
  // How the training shards are reached (set by Start).
  std::shared_ptr<grpc::ChannelCredentials> channel_credentials_;
  grpc::ChannelArguments channel_args_;
  std::vector<std::thread> threads_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_FOLLOWER_H_
