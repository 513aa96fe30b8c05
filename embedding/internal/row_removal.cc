#include "embedding/internal/row_removal.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/numeric/bits.h"
#include "common/status_macros.h"
#include "embedding/internal/spill_policy.h"
#include "embedding/internal/stripe_batch.h"

namespace embedps::embedding_internal {
namespace {

// What eviction knows of a row: its last touch.
struct RowUse {
  uint32_t last_touch;
};

RowUse UseOfRecord(const char* record) {
  RowUse use;
  std::memcpy(&use.last_touch, record, sizeof(use.last_touch));
  return use;
}

// Evicts the resident rows `doomed(use)` picks, stripe by stripe, at most
// kRowsPerLockHold rows per lock hold.
template <typename Doomed>
absl::StatusOr<uint64_t> EvictResident(TableCore& core, Doomed&& doomed) {
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
        if (!doomed(RowUse{header.last_touch})) {
          continue;
        }
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
  return evicted;
}

// Evicts spilled rows: those `chosen(use)` picks in a scan of the spill
// tier, then re-checked and deleted under each stripe's lock, batched: a
// row resident by then stays, and so does one whose record `confirmed`
// rejects now.
template <typename Chosen, typename Confirmed>
absl::StatusOr<uint64_t> EvictSpilled(TableCore& core, Chosen&& chosen,
                                      Confirmed&& confirmed) {
  std::vector<uint64_t> candidates;
  RETURN_IF_ERROR(
      core.spill->NewReadView()->ForEach([&](uint64_t key, const char* record) {
        if (chosen(UseOfRecord(record))) candidates.push_back(key);
        return absl::OkStatus();
      }));
  if (candidates.empty()) return 0;
  BatchScratch& scratch = core.GroupByStripe(candidates, ThreadScratch());
  uint64_t evicted = 0;
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    if (scratch.group_begin[s] == scratch.group_begin[s + 1]) continue;
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    const std::vector<uint64_t> stripe_keys =
        KeysAt(candidates, scratch.GroupOrder(s));
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
      if (!confirmed(UseOfRecord(record))) continue;
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

// Rows held, both tiers.
uint64_t RowsHeld(const TableCore& core) {
  uint64_t rows = 0;
  for (const auto& stripe : core.stripes) {
    ReaderMutexLock lock(&stripe->mu);
    rows += stripe->index().size() + stripe->spill().spilled_rows;
  }
  return rows;
}

// Rows are ranked for the cap by age, the time since their last touch (in
// the TTL's unit), in buckets 1/8 of an octave wide: ages 0..7 exactly,
// then 8 buckets per power of two. Higher buckets are older.
constexpr int kAgeBuckets = 8 + 29 * 8;
int AgeBucket(uint64_t now, uint32_t last_touch) {
  const uint64_t age = now > last_touch ? now - last_touch : 0;
  if (age < 8) return static_cast<int>(age);
  const int octave = 63 - absl::countl_zero(age);  // >= 3
  const int bucket =
      8 + (octave - 3) * 8 + static_cast<int>((age >> (octave - 3)) & 7);
  return std::min(bucket, kAgeBuckets - 1);
}

}  // namespace

absl::StatusOr<uint64_t> EvictBeyondCap(TableCore& core) {
  const uint64_t cap = core.spec.eviction.max_rows;
  if (cap == 0) return 0;
  const uint64_t held = RowsHeld(core);
  if (held <= cap) return 0;
  const uint64_t now = core.Now();
  // A histogram of the rows' ages picks the `excess` least recently
  // touched rows: every row older than the cut-off bucket, and rows of
  // that bucket in the order the eviction meets them.
  std::vector<uint64_t> histogram(kAgeBuckets, 0);
  const auto count_age = [&](RowUse use) {
    ++histogram[AgeBucket(now, use.last_touch)];
    return false;
  };
  RETURN_IF_ERROR(EvictResident(core, count_age).status());
  if (core.spill != nullptr) {
    RETURN_IF_ERROR(
        EvictSpilled(core, count_age, [](RowUse) { return false; }).status());
  }
  uint64_t excess = held - cap;
  int cut = kAgeBuckets - 1;
  uint64_t older = 0;
  while (cut > 0 && older + histogram[cut] < excess) older += histogram[cut--];
  uint64_t quota = excess - older;  // rows of bucket `cut` to evict
  const auto doomed = [&](RowUse use) {
    if (excess == 0) return false;
    const int bucket = AgeBucket(now, use.last_touch);
    if (bucket < cut || (bucket == cut && quota == 0)) return false;
    if (bucket == cut) --quota;
    --excess;
    return true;
  };
  // Spilled rows first: the spill tier holds the ones CLOCK found coldest.
  uint64_t evicted = 0;
  if (core.spill != nullptr) {
    ASSIGN_OR_RETURN(evicted,
                     EvictSpilled(core, doomed, [](RowUse) { return true; }));
  }
  ASSIGN_OR_RETURN(const uint64_t resident, EvictResident(core, doomed));
  return evicted + resident;
}

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
  const uint64_t now = core.Now();
  const auto expired = [&](RowUse use) {
    return core.Expired(use.last_touch, now);
  };
  ASSIGN_OR_RETURN(uint64_t evicted, EvictResident(core, expired));
  if (core.spill != nullptr) {
    ASSIGN_OR_RETURN(const uint64_t spilled,
                     EvictSpilled(core, expired, expired));
    evicted += spilled;
  }
  return evicted;
}

}  // namespace embedps::embedding_internal
