// The state of one table that its parts share: constants, the lock stripes
// and the spill tier, and the per-thread scratch that groups a batch by
// stripe. MemoryTable (embedding/table.cc) owns one; the batch pipeline
// (batch_pipeline.h, stripe_batch.h), the spill policy (spill_policy.h),
// snapshots (table_snapshot.h), restores (table_restore.h) and the TTL sweep
// (ttl_sweep.h) work on it.
//
// Thread safety: the constants never change after construction. Each
// stripe's state is guarded by its own mutex (stripe.h). The atomics are
// relaxed counters and flags: `tracking_changes` is written under every
// stripe's lock (TakeSnapshot) and read under one.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_TABLE_CORE_H_
#define EMBEDPS_EMBEDDING_INTERNAL_TABLE_CORE_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "embedding/internal/row_layout.h"
#include "embedding/internal/spill_store.h"
#include "embedding/internal/stripe.h"
#include "embedding/optimizer.h"
#include "embedding/table.h"
#include "embedding/table_spec.h"

namespace embedps::embedding_internal {

using embedding::AccessContext;
using embedding::TableOptions;
using embedding::TableSpec;

// Per-thread scratch of one batch: the batch's keys grouped by stripe.
struct BatchScratch {
  std::vector<uint64_t> position_hashes;  // KeyHash of keys[i]
  std::vector<uint32_t> order;            // batch positions, grouped by stripe
  std::vector<uint64_t> hashes;           // KeyHash of keys[order[j]]
  std::vector<uint32_t> group_begin;      // stripe s: [group_begin[s], [s+1])
  std::vector<uint32_t> cursor;           // counting-sort insertion points
  std::vector<RowId> rows;                // row id per grouped position
  // Bitmaps over a stripe's row ids, for finding duplicates in a Push.
  // All zero between uses.
  std::vector<uint64_t> seen_rows;
  std::vector<uint64_t> repeated_rows;
  // Push: summed gradients of rows named more than once, by slot.
  absl::flat_hash_map<RowId, uint32_t> repeated_slot;
  std::vector<float> repeated_sums;
  std::vector<int32_t> deferred;  // stripes whose lock was busy
  // Spill tier: batch positions left for the second pass, and each
  // stripe's SpillState::generation when the first pass saw it.
  std::vector<uint32_t> missed_positions;
  std::vector<uint64_t> generation_seen;

  // The batch positions of stripe `s`'s group.
  absl::Span<const uint32_t> GroupOrder(size_t s) const {
    return absl::MakeConstSpan(order).subspan(
        group_begin[s], group_begin[s + 1] - group_begin[s]);
  }
};

// Which of the calling thread's two scratches: a request's batch, and the
// second pass over its misses.
enum class Scratch { kBatch = 0, kMisses = 1 };
BatchScratch& ThreadScratch(Scratch which = Scratch::kBatch);

// Floats a row of `dim` values and `state_floats` of optimizer state takes
// in a stripe's arena: header, embedding, state, padded to 16 bytes.
int32_t ArenaRowFloats(int32_t dim, int32_t state_floats);

// Rows each stripe commits for spec.expected_rows: its share plus room for
// the hash's imbalance (four standard deviations of a binomial share), at
// most kMaxRowsPerStripe and `cap`. 0 without a hint.
uint64_t ExpectedRowsPerStripe(const TableSpec& spec, uint64_t cap);

struct TableCore {
  TableCore(const TableSpec& spec, TableOptions options,
            std::unique_ptr<SpillStore> spill);
  TableCore(const TableCore&) = delete;
  TableCore& operator=(const TableCore&) = delete;

  // Constant after construction.
  const TableSpec spec;
  const TableOptions options;
  const int32_t dim;
  const std::unique_ptr<embedding::RowOptimizer> optimizer;
  const int32_t state_floats;
  // Floats a row takes in the arena: header, embedding, state, padded to
  // 16 bytes.
  const int32_t row_floats;
  const uint32_t stripe_mask;
  // RowRecordBytes(dim, state_floats).
  const size_t record_bytes;
  // Seconds of TTLs count from here.
  const absl::Time epoch;
  std::vector<std::unique_ptr<Stripe>> stripes;
  // Null for a memory-only table.
  const std::unique_ptr<SpillStore> spill;
  // With a spill tier: resident rows a stripe may hold, and keys its
  // dirty_keys and removed_keys may hold together (spill_policy.h).
  uint64_t max_resident_per_stripe = UINT64_MAX;
  uint64_t max_tracked_keys_per_stripe = UINT64_MAX;

  // Set by the first snapshot: from then on removals are recorded for
  // incremental snapshots.
  std::atomic<bool> tracking_changes{false};
  // Set once some row held a value beyond 2^64 (push_undo.h): from then
  // on every Push is logged.
  std::atomic<bool> large_values{false};
  // Where ForEachStripe starts.
  std::atomic<uint32_t> rotation{0};
  // Largest AccessContext::step seen (TTL in steps).
  std::atomic<uint64_t> latest_step{0};
  // Set once by Table::EnableChangeLog: from then on every change of a
  // row's values (update, creation, removal, restore) is logged.
  std::atomic<bool> change_log{false};

  // Commits every stripe's ExpectedRowsPerStripe (capped by
  // max_resident_per_stripe) and sizes its index: Table::Create, before the
  // table is shared. RESOURCE_EXHAUSTED if the OS refuses the memory.
  absl::Status CommitExpectedRows();

  uint32_t StripeIndex(uint64_t hash) const {
    return StripeIndexOfHash(hash, stripe_mask);
  }
  Stripe& StripeOf(uint64_t hash) const { return *stripes[StripeIndex(hash)]; }
  uint32_t num_stripes() const { return static_cast<uint32_t>(stripes.size()); }

  // Sorts batch positions by stripe (a counting sort) into `scratch`, with
  // each key's hash; returns it.
  BatchScratch& GroupByStripe(absl::Span<const uint64_t> keys,
                              BatchScratch& scratch) const;

  // Runs `work(stripe, s, begin, end)` under each stripe's lock for the
  // stripes that have keys in the grouped batch. Starts at a different
  // stripe per call and defers stripes whose lock is busy, so that
  // concurrent batches rarely wait on each other. Returns the first error;
  // every stripe is visited regardless.
  template <typename Work>
  absl::Status ForEachStripe(BatchScratch& scratch, Work&& work);

  // The last-touch value of rows touched by a request in `context` (steps
  // or seconds, per the TTL unit); records the latest step.
  uint32_t Touch(const AccessContext& context);
  uint64_t SecondsSinceEpoch() const;
  // The present in last-touch units: the latest step, or seconds.
  uint64_t Now() const {
    return spec.eviction.ttl_unit == embedding::EvictionSpec::TtlUnit::kSteps
               ? latest_step.load(std::memory_order_relaxed)
               : SecondsSinceEpoch();
  }
  // A row last touched at `last_touch` is past the TTL at `now`.
  bool Expired(uint32_t last_touch, uint64_t now) const {
    return last_touch < now && now - last_touch > spec.eviction.ttl;
  }

  // `key` lost its row: remembered for the next incremental snapshot once
  // snapshots are taken, and logged.
  void NoteRemoved(Stripe& stripe, uint64_t key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    TrackChange(stripe, stripe.spill().removed_keys, key);
    LogChange(stripe, key);
  }

  // Once snapshots are taken, remembers `key` in `keys` (the stripe's
  // dirty_keys or removed_keys) for the next incremental snapshot; if the
  // stripe tracks max_tracked_keys_per_stripe keys already, drops both sets
  // instead and makes the next snapshot full (SpillState).
  void TrackChange(Stripe& stripe, absl::flat_hash_set<uint64_t>& keys,
                   uint64_t key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    SpillState& spill = stripe.spill();
    if (!tracking_changes.load(std::memory_order_relaxed) ||
        spill.tracking_overflowed) {
      return;
    }
    if (spill.dirty_keys.size() + spill.removed_keys.size() >=
        max_tracked_keys_per_stripe) {
      spill.tracking_overflowed = true;
      spill.dirty_keys = {};  // frees the memory
      spill.removed_keys = {};
      return;
    }
    keys.insert(key);
  }

  // With the change log on: `key`'s row changed, appeared or went.
  void LogChange(Stripe& stripe, uint64_t key) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    if (change_log.load(std::memory_order_relaxed)) {
      stripe.changes().push_back(key);
    }
  }
};

template <typename Work>
absl::Status TableCore::ForEachStripe(BatchScratch& scratch, Work&& work) {
  const uint32_t n = num_stripes();
  const uint32_t start =
      rotation.fetch_add(7, std::memory_order_relaxed) & stripe_mask;
  scratch.deferred.clear();
  absl::Status status;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t s = (start + k) & stripe_mask;
    const uint32_t begin = scratch.group_begin[s];
    const uint32_t end = scratch.group_begin[s + 1];
    if (begin == end) continue;
    Stripe& stripe = *stripes[s];
    if (stripe.mu.TryLock()) {
      status.Update(work(stripe, s, begin, end));
      stripe.mu.Unlock();
    } else {
      scratch.deferred.push_back(static_cast<int32_t>(s));
    }
  }
  for (int32_t s : scratch.deferred) {
    Stripe& stripe = *stripes[s];
    MutexLock lock(&stripe.mu);
    status.Update(work(stripe, static_cast<uint32_t>(s), scratch.group_begin[s],
                       scratch.group_begin[s + 1]));
  }
  return status;
}

// Distinct keys of `keys`, sorted.
std::vector<uint64_t> SortedUnique(absl::Span<const uint64_t> keys);

// keys[positions[i]] for every i.
std::vector<uint64_t> KeysAt(absl::Span<const uint64_t> keys,
                             absl::Span<const uint32_t> positions);

// The rows (`width` elements each) of `rows` at `positions`, in order.
template <typename T>
std::vector<T> RowsAt(absl::Span<const T> rows, size_t width,
                      absl::Span<const uint32_t> positions) {
  std::vector<T> out(positions.size() * width);
  for (size_t i = 0; i < positions.size(); ++i) {
    std::memcpy(out.data() + i * width,
                rows.data() + static_cast<size_t>(positions[i]) * width,
                sizeof(T) * width);
  }
  return out;
}

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_TABLE_CORE_H_
