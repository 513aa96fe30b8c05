#include "embedding/internal/batch_pipeline.h"

#include <algorithm>
#include <cstring>

namespace embedps::embedding_internal {

MissPolicy FirstPassPolicy(const TableCore& core, BatchScratch& scratch) {
  if (core.spill == nullptr) return MissPolicy{};
  scratch.missed_positions.clear();
  scratch.generation_seen.assign(core.stripes.size(), 0);
  return MissPolicy{&scratch.missed_positions, nullptr};
}

std::vector<uint32_t> SortedMisses(const BatchScratch& scratch) {
  std::vector<uint32_t> missed = scratch.missed_positions;
  std::sort(missed.begin(), missed.end());
  return missed;
}

absl::StatusOr<uint64_t> LookupSpilled(const TableCore& core,
                                       absl::Span<const uint64_t> keys,
                                       const RowCopy& copy,
                                       absl::Span<bool> found,
                                       const BatchScratch& scratch) {
  const std::vector<uint32_t> missed = SortedMisses(scratch);
  const std::vector<uint64_t> miss_keys = KeysAt(keys, missed);
  FetchedRows fetched(core.record_bytes);
  RETURN_IF_ERROR(fetched.Fetch(*core.spill, SortedUnique(miss_keys)));
  BatchScratch& sub =
      core.GroupByStripe(miss_keys, ThreadScratch(Scratch::kMisses));
  uint64_t hits = 0;
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    const uint32_t begin = sub.group_begin[s];
    const uint32_t end = sub.group_begin[s + 1];
    if (begin == end) continue;
    const Stripe& stripe = *core.stripes[s];
    ReaderMutexLock lock(&stripe.mu);
    const bool changed =
        stripe.spill().generation != scratch.generation_seen[s];
    if (changed) {
      RETURN_IF_ERROR(fetched.Fetch(
          *core.spill, SortedUnique(KeysAt(miss_keys, sub.GroupOrder(s)))));
    }
    for (uint32_t j = begin; j < end; ++j) {
      const uint32_t pos = missed[sub.order[j]];
      char* out = copy.out + static_cast<size_t>(pos) * copy.bytes;
      const char* source = nullptr;
      if (changed) {
        // Promoted since the first pass?
        const RowId id = stripe.Find(KeyProbe{keys[pos], sub.hashes[j]});
        if (id != kNoRow) source = stripe.Record(id);
      }
      if (source == nullptr) source = fetched.Find(keys[pos]);
      if (source == nullptr) continue;
      std::memcpy(out, source + copy.from, copy.bytes);
      found[pos] = true;
      ++hits;
    }
  }
  return hits;
}

}  // namespace embedps::embedding_internal
