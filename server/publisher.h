// Publisher: a training shard's publications of its changed rows, for the
// serving replicas that follow training (docs/architecture.md, "Serving").
//
// Publish — called by the job's rank 0 every few seconds, at a step
// boundary — takes every table's changed keys (Table::TakeChangedKeys; a
// table's first publication turns its change log on and holds every row
// instead, so that a replica starting from any checkpoint, taken before or
// after the job's first Publish, reaches the training state), reads their
// current values, and keeps the publication, in messages of at most
// `max_message_bytes`, in a history bounded by `history_bytes` (the oldest
// go first). A subscriber reads the publications after the last one it
// applied (After); one that fell behind the history, or that followed a
// publisher that has since restarted (another id), must catch up from a
// checkpoint first.
//
// Why every changed row's value is in some publication: the change log is
// taken before the values are read, and a change made after the take is in
// the next publication. In SYNC mode a publication at step t holds exactly
// the tables after step t (Publish waits for step t to be applied, and step
// t + 1 cannot be applied before rank 0, which is in Publish, pushes it).
//
// Thread safety: thread-safe; Publish calls are serialized.
#ifndef EMBEDPS_SERVER_PUBLISHER_H_
#define EMBEDPS_SERVER_PUBLISHER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/training.pb.h"
#include "server/table_registry.h"

namespace embedps::server {

struct PublisherOptions {
  // This shard. Defaults: 0 of 1.
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  // Bytes of publications kept for subscribers that fall behind or
  // reconnect. Default: 512 MiB.
  uint64_t history_bytes = uint64_t{512} << 20;
  // Largest message of a publication. Default: 32 MiB.
  uint64_t max_message_bytes = uint64_t{32} << 20;
};

class Publisher {
 public:
  // `registry` must outlive the publisher.
  Publisher(PublisherOptions options, TableRegistry* registry);
  ~Publisher();
  Publisher(const Publisher&) = delete;
  Publisher& operator=(const Publisher&) = delete;

  // Random, fixed for this process: a subscriber tells a restarted
  // publisher by it.
  uint64_t id() const { return id_; }

  // A publication of every table's rows changed since the previous one, at
  // `request.step`. DEADLINE_EXCEEDED if a SYNC/SSP table does not reach
  // the step within its timeout (nothing is taken then).
  absl::StatusOr<proto::PublishResponse> Publish(
      const proto::PublishRequest& request);

  // The messages of every publication after `after_sequence` of publisher
  // `publisher_id` (0, 0: a fresh subscriber, from the oldest held whose
  // step is greater than `after_step`), in order; waits until `deadline`
  // for one if there is none yet, and then returns none.
  // FAILED_PRECONDITION if `publisher_id` is another publisher's, or the
  // history no longer holds the next publication; CANCELLED once Close was
  // called.
  absl::StatusOr<std::vector<std::shared_ptr<const proto::Publication>>> After(
      uint64_t publisher_id, uint64_t after_sequence, absl::Time deadline,
      uint64_t after_step = 0);

  // Wakes every waiting After (which then returns CANCELLED). For shutdown.
  void Close();

  // The last publication's sequence and step (0, 0 before the first).
  uint64_t last_sequence() const;

 private:
  struct Held {
    uint64_t sequence;
    uint64_t step;
    uint64_t bytes;
    std::vector<std::shared_ptr<const proto::Publication>> parts;
  };
  // The publication's tables, split into messages.
  absl::StatusOr<std::vector<proto::Publication>> Collect(
      const proto::PublishRequest& request);

  const PublisherOptions options_;
  TableRegistry* const registry_;
  const uint64_t id_;
  Mutex publish_mu_;  // one Publish at a time

  mutable Mutex mu_;
  CondVar published_;
  std::deque<Held> history_ ABSL_GUARDED_BY(mu_);
  uint64_t history_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  // The step of the last publication (none yet: -1 as all ones).
  uint64_t last_step_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  // Tables whose change log the publications follow (their first
  // publication held every row), by the registry entry's hold. Collect's,
  // under publish_mu_.
  absl::flat_hash_map<const embedding::Table*, std::weak_ptr<const void>>
      tracked_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_PUBLISHER_H_
