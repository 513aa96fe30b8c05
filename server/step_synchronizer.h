// StepSynchronizer: the SYNC (bulk-synchronous) and SSP (stale-synchronous)
// consistency modes of one table on one shard.
//
// Workers are told apart by client id. Each worker marks the end of its
// step t on this shard with the part count it sent (PushRequest's
// parts_in_step), so that the step is complete when all its parts arrived,
// in any order.
//
// SYNC: gradients of step t are summed per key as they arrive (per key in
// arrival order) and applied with one optimizer update per key when all
// `num_workers` workers completed step t. Pull(t) waits until steps before t
// are applied. Steps are applied in order; a step of many keys is applied
// in pieces on up to `apply_threads` threads (every worker's next Pull
// waits for it). Its sums are checked finite first, so a sum that
// overflowed refuses the whole step; a row an update would overflow puts
// back its piece's earlier rows only (embedding::Table::Push), the other
// pieces keep theirs.
// SSP(s): gradients apply on arrival. Pull(t) waits until every worker has
// completed step t - s - 1 (workers not yet heard from count as not
// started).
// A Pull that waits longer than `timeout` gets DEADLINE_EXCEEDED naming the
// step and how many workers are missing.
//
// Thread safety: thread-safe. Pull waits block the calling thread.
#ifndef EMBEDPS_SERVER_STEP_SYNCHRONIZER_H_
#define EMBEDPS_SERVER_STEP_SYNCHRONIZER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "embedding/table.h"
#include "proto/replication.pb.h"

namespace embedps::server {

class StepSynchronizer {
 public:
  enum class Mode { kSync, kSsp };

  // `table` must outlive this. REQUIRES: num_workers >= 1.
  StepSynchronizer(Mode mode, uint32_t staleness, int32_t num_workers,
                   absl::Duration timeout, embedding::Table* table,
                   int32_t apply_threads = 1);

  // Keys below which a piece of a SYNC step's apply is not worth a thread.
  static constexpr size_t kKeysPerApplyThread = 8192;

  // Returns when a Pull for `step` may read the table.
  absl::Status AwaitPullable(uint64_t step);

  // Whether AwaitPullable(step) would return at once (steps only advance:
  // once true, it stays true).
  bool Pullable(uint64_t step);

  // One push part of `client_id` for `step` (keys may be empty when
  // `parts_in_step` closes the step). FAILED_PRECONDITION for a SYNC step
  // that was already applied. Errors of the table (NaN/Inf) come back
  // unchanged and the part is not counted.
  absl::Status Push(uint64_t client_id, uint64_t step, uint32_t parts_in_step,
                    absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads);

  Mode mode() const { return mode_; }

  // SYNC, for a Pull that reads the table before its step is pullable (so
  // that the read overlaps the wait): the step the table is at now — steps
  // before it are applied. Once the Pull's step is pullable, that reading
  // is current for every key but those ChangedKeys(then, step) names.
  uint64_t AppliedThrough();

  // The keys of one applied SYNC step (key → its place in the step's sum).
  using StepKeys = absl::flat_hash_map<uint64_t, uint32_t>;
  // SYNC: the key sets of the applied steps [from, to), into `sets`; false
  // when one of them is no longer remembered (the last kRememberedSteps
  // applied are, since the last ImportState) or not applied yet.
  static constexpr size_t kRememberedSteps = 8;
  bool ChangedKeys(uint64_t from, uint64_t to,
                   std::vector<std::shared_ptr<const StepKeys>>* sets);

  // Its progress (for a replica catching up), and the same restored into a
  // synchronizer of a table with the same spec. INVALID_ARGUMENT for a
  // state that does not fit (sizes, steps out of order); nothing changes
  // then.
  proto::SynchronizerState ExportState();
  absl::Status ImportState(const proto::SynchronizerState& state);

 private:
  struct WorkerProgress {
    uint32_t parts_received = 0;
    uint32_t parts_expected = 0;  // 0 until the closing part arrives
  };
  struct PendingStep {
    absl::flat_hash_map<uint64_t, uint32_t> slot_of_key;
    std::vector<uint64_t> keys;
    std::vector<float> sums;
    absl::flat_hash_map<uint64_t, WorkerProgress> workers;
    int32_t completed_workers = 0;
  };

  // Applies completed SYNC steps in order. REQUIRES: mu_ held.
  absl::Status ApplyCompletedSteps();
  // One completed step's sums into the table, in pieces over the threads.
  absl::Status ApplyStep(uint64_t step, const PendingStep& pending);
  // Records a part; returns true if it completed the worker's step.
  static bool CountPart(WorkerProgress& progress, uint32_t parts_in_step);
  // The number of workers that completed `step` (SSP). REQUIRES: mu_ held.
  int32_t WorkersPast(uint64_t step) const;

  const Mode mode_;
  const uint32_t staleness_;
  const int32_t num_workers_;
  const absl::Duration timeout_;
  embedding::Table* const table_;
  const int32_t dim_;
  const int32_t apply_threads_;

  Mutex mu_;
  CondVar progressed_;
  // SYNC: steps before this one are applied. Set by the first request.
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_step_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, PendingStep> pending_ ABSL_GUARDED_BY(mu_);
  // SYNC: the keys of the last applied steps, the newest last; the first
  // is step next_step_ - applied_keys_.size().
  std::deque<std::shared_ptr<const StepKeys>> applied_keys_
      ABSL_GUARDED_BY(mu_);
  // SSP: per worker, parts of its current step and the steps it completed.
  absl::flat_hash_map<uint64_t, absl::flat_hash_map<uint64_t, WorkerProgress>>
      ssp_parts_ ABSL_GUARDED_BY(mu_);
  // Per worker: the last step completed, plus one.
  absl::flat_hash_map<uint64_t, uint64_t> ssp_completed_through_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_STEP_SYNCHRONIZER_H_
