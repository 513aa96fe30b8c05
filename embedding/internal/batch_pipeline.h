// The two passes of a batched Pull, Push or Lookup over a table:
//
//  1. over memory: each stripe's group under that stripe's lock
//     (TableCore::ForEachStripe); with a spill tier, keys without a
//     resident row are deferred and each stripe's spill generation is
//     recorded;
//  2. only with a spill tier and deferred keys: one MultiGet of all
//     distinct missed keys with no lock held, then each stripe with misses
//     under its lock again promotes what was fetched (re-reading its keys,
//     batched, if the stripe wrote to the spill tier since pass 1 saw it:
//     the generation moved) and settles its evictions (spill_policy.h).
//
// So a request makes at most one MultiGet in the common case, and never
// holds a lock while it reads the disk.
//
// Thread safety: takes and releases the stripes' locks itself; the caller
// holds none.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_BATCH_PIPELINE_H_
#define EMBEDPS_EMBEDDING_INTERNAL_BATCH_PIPELINE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "embedding/internal/spill_policy.h"
#include "embedding/internal/stripe.h"
#include "embedding/internal/stripe_batch.h"
#include "embedding/internal/table_core.h"

namespace embedps::embedding_internal {

// The first pass of a batch defers misses when there is a spill tier:
// clears scratch's miss list and generations.
MissPolicy FirstPassPolicy(const TableCore& core, BatchScratch& scratch);

// Pass 1 with a spill tier: stripe `s`'s generation as this pass saw it.
inline void RecordGeneration(const TableCore& core, BatchScratch& scratch,
                             const Stripe& stripe, uint32_t s)
    ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
  if (core.spill != nullptr) {
    scratch.generation_seen[s] = stripe.spill().generation;
  }
}

// With a spill tier: the group's keys into the stripe's frequency sketch.
inline void CountSightings(Stripe& stripe, const BatchScratch& scratch,
                           uint32_t begin, uint32_t end)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
  CountMinSketch* frequency = stripe.spill().frequency.get();
  if (frequency == nullptr) return;
  for (uint32_t j = begin; j < end; ++j) frequency->Add(scratch.hashes[j]);
}

// Pass 1: runs `group(stripe, begin, end, policy)` under each stripe's lock
// over the grouped batch; with a spill tier, misses are deferred to
// scratch.missed_positions and each stripe's generation is recorded.
template <typename Group>
absl::Status FirstPass(TableCore& core, BatchScratch& scratch, Group&& group) {
  const MissPolicy policy = FirstPassPolicy(core, scratch);
  return core.ForEachStripe(
      scratch, [&](Stripe& stripe, uint32_t s, uint32_t begin, uint32_t end)
                   ABSL_NO_THREAD_SAFETY_ANALYSIS {
                     RecordGeneration(core, scratch, stripe, s);
                     CountSightings(stripe, scratch, begin, end);
                     return group(stripe, begin, end, policy);
                   });
}

// The deferred positions in batch order.
std::vector<uint32_t> SortedMisses(const BatchScratch& scratch);

// Pass 2 over a batch's misses (`miss_keys`, in batch order):
// `work(stripe, sub, begin, end, policy)` runs under each stripe's lock
// with the fetched rows to promote, then the stripe settles its spill
// writes and evictions. REQUIRES: core.spill is not null.
template <typename Work>
absl::Status ResolveMisses(TableCore& core,
                           absl::Span<const uint64_t> miss_keys,
                           absl::Span<const uint64_t> generation_seen,
                           Work&& work) {
  FetchedRows fetched(core.record_bytes);
  RETURN_IF_ERROR(fetched.Fetch(*core.spill, SortedUnique(miss_keys)));
  BatchScratch& sub =
      core.GroupByStripe(miss_keys, ThreadScratch(Scratch::kMisses));
  SpillWrites writes;
  absl::Status status;
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    const uint32_t begin = sub.group_begin[s];
    const uint32_t end = sub.group_begin[s + 1];
    if (begin == end) continue;
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    if (stripe.spill().generation != generation_seen[s]) {
      RETURN_IF_ERROR(fetched.Fetch(
          *core.spill, SortedUnique(KeysAt(miss_keys, sub.GroupOrder(s)))));
    }
    writes.clear();
    status.Update(work(stripe, sub, begin, end, MissPolicy{nullptr, &fetched}));
    status.Update(SettleSpill(core, stripe, writes));
  }
  return status;
}

// Pass 2 of a Lookup or ReadRecords: copies the misses of `scratch` (pass
// 1's) from the spill tier as `copy` says and sets `found`; stripes whose
// tier changed since pass 1 are read again under their lock. Returns the
// keys found.
absl::StatusOr<uint64_t> LookupSpilled(const TableCore& core,
                                       absl::Span<const uint64_t> keys,
                                       const RowCopy& copy,
                                       absl::Span<bool> found,
                                       const BatchScratch& scratch);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_BATCH_PIPELINE_H_
