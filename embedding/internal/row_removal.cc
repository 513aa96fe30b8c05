#include "embedding/internal/row_removal.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/status_macros.h"
#include "embedding/internal/spill_policy.h"
#include "embedding/internal/stripe_batch.h"

namespace embedps::embedding_internal {
namespace {

// TTL over the spill tier: expired rows found by a scan, then checked again
// and deleted under each stripe's lock.
absl::StatusOr<uint64_t> SweepSpilled(TableCore& core, uint64_t now) {
  std::vector<uint64_t> expired;
  RETURN_IF_ERROR(
      core.spill->NewReadView()->ForEach([&](uint64_t key, const char* record) {
        uint32_t last_touch;
        std::memcpy(&last_touch, record, sizeof(last_touch));
        if (core.Expired(last_touch, now)) expired.push_back(key);
        return absl::OkStatus();
      }));
  if (expired.empty()) return 0;
  BatchScratch& scratch = core.GroupByStripe(expired, ThreadScratch());
  uint64_t evicted = 0;
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    if (scratch.group_begin[s] == scratch.group_begin[s + 1]) continue;
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    const std::vector<uint64_t> stripe_keys =
        KeysAt(expired, scratch.GroupOrder(s));
    FetchedRows fetched(core.record_bytes);
    RETURN_IF_ERROR(fetched.Fetch(*core.spill, stripe_keys));
    SpillWrites writes;
    for (uint64_t key : stripe_keys) {
      const char* record = fetched.Find(key);
      if (record == nullptr) continue;
      const RowId resident = stripe.Find(KeyProbe{key, KeyHash(key)});
      if (resident != kNoRow) {
        // A stale copy is garbage; a current one saves the row's next
        // eviction a write.
        if (stripe.SpillCopyMetadata(resident) == Stripe::kNoCurrentCopy) {
          writes.delete_keys.push_back(key);
        }
        continue;
      }
      uint32_t last_touch;
      std::memcpy(&last_touch, record, sizeof(last_touch));
      if (!core.Expired(last_touch, now)) continue;
      writes.delete_keys.push_back(key);
      --stripe.spill().spilled_rows;
      stripe.spill().dirty_keys.erase(key);
      core.NoteRemoved(stripe, key);
      ++stripe.counters().evicted;
      ++evicted;
    }
    RETURN_IF_ERROR(SettleSpill(core, stripe, writes));
  }
  return evicted;
}

}  // namespace

absl::StatusOr<uint64_t> EraseRows(TableCore& core,
                                   absl::Span<const uint64_t> keys) {
  BatchScratch& scratch = core.GroupByStripe(keys, ThreadScratch());
  uint64_t erased = 0;
  std::vector<uint64_t> not_resident;
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    const uint32_t begin = scratch.group_begin[s];
    const uint32_t end = scratch.group_begin[s + 1];
    if (begin == end) continue;
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    not_resident.clear();
    SpillWrites writes;
    for (uint32_t j = begin; j < end; ++j) {
      const uint64_t key = keys[scratch.order[j]];
      const RowId id = stripe.Find(KeyProbe{key, scratch.hashes[j]});
      if (id == kNoRow) {
        not_resident.push_back(key);
        continue;
      }
      // A stale spill-tier copy must not bring the row back.
      if (core.spill != nullptr) writes.delete_keys.push_back(key);
      stripe.FreeRow(id, scratch.hashes[j]);
      core.NoteRemoved(stripe, key);
      ++stripe.counters().erased;
      ++erased;
    }
    if (core.spill == nullptr) continue;
    // Spilled rows: found with one MultiGet under the lock, deleted in one
    // batch.
    const std::vector<uint64_t> candidates = SortedUnique(not_resident);
    FetchedRows fetched(core.record_bytes);
    RETURN_IF_ERROR(fetched.Fetch(*core.spill, candidates));
    for (uint64_t key : candidates) {
      if (fetched.Find(key) == nullptr) continue;
      writes.delete_keys.push_back(key);
      --stripe.spill().spilled_rows;
      stripe.spill().dirty_keys.erase(key);
      core.NoteRemoved(stripe, key);
      ++stripe.counters().erased;
      ++erased;
    }
    RETURN_IF_ERROR(SettleSpill(core, stripe, writes));
  }
  return erased;
}

absl::StatusOr<uint64_t> SweepExpiredRows(TableCore& core) {
  if (core.spec.eviction.ttl == 0) return 0;
  const uint64_t now =
      core.spec.eviction.ttl_unit == embedding::EvictionSpec::TtlUnit::kSteps
          ? core.latest_step.load(std::memory_order_relaxed)
          : core.SecondsSinceEpoch();
  uint64_t evicted = 0;
  for (auto& stripe_ptr : core.stripes) {
    Stripe& stripe = *stripe_ptr;
    for (RowId begin = 0;; begin += kRowsPerLockHold) {
      MutexLock lock(&stripe.mu);
      const RowId end =
          std::min<RowId>(stripe.used_rows(), begin + kRowsPerLockHold);
      if (begin >= end) break;
      std::vector<uint64_t> deleted;
      for (RowId id = begin; id < end; ++id) {
        const RowHeader& header = stripe.Header(id);
        if (header.last_touch == kFreeRowMark) continue;
        if (!core.Expired(header.last_touch, now)) continue;
        core.NoteRemoved(stripe, header.key);
        // A stale spill-tier copy must not bring the row back.
        if (core.spill != nullptr) deleted.push_back(header.key);
        stripe.FreeRow(id, KeyHash(header.key));
        ++stripe.counters().evicted;
        ++evicted;
      }
      if (!deleted.empty()) {
        RETURN_IF_ERROR(core.spill->Write({}, nullptr, deleted));
        ++stripe.spill().generation;
      }
    }
  }
  if (core.spill != nullptr) {
    ASSIGN_OR_RETURN(const uint64_t spilled, SweepSpilled(core, now));
    evicted += spilled;
  }
  return evicted;
}

}  // namespace embedps::embedding_internal
