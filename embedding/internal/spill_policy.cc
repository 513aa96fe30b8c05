#include "embedding/internal/spill_policy.h"

#include <algorithm>

#include "absl/numeric/bits.h"
#include "common/status_macros.h"

namespace embedps::embedding_internal {

SpillReserve PlanSpillReserve(uint64_t budget_bytes,
                              uint64_t block_cache_limit) {
  SpillReserve reserve;
  reserve.memtable_bytes =
      std::clamp<uint64_t>(budget_bytes / 32, kMinMemtableBytes, 16 << 20);
  reserve.block_cache_bytes = std::max<uint64_t>(
      std::min(budget_bytes / 8, block_cache_limit), 64 << 10);
  reserve.tracked_key_bytes = budget_bytes / 16;
  return reserve;
}

SpillBudget PlanSpillBudget(const embedding::TableSpec& spec,
                            int32_t row_floats, uint64_t admission_bytes,
                            const SpillReserve& reserve) {
  // The budget covers the reserve, rows, their index slots (5 bytes over a
  // load factor of at least 7/16) and their spill copies' metadata (8
  // bytes, an eighth spare: Stripe::NoteCurrentSpillCopy).
  // (A budget of a few MiB or less is below the reserve's floors, which
  // then take more than their share: the rows keep 11/16 of it.)
  const uint64_t for_stripes =
      spec.memory_budget_bytes -
      std::min(reserve.total(), spec.memory_budget_bytes / 16 * 5);
  const uint64_t per_stripe = for_stripes / spec.num_stripes;
  const uint64_t row_cost = sizeof(float) * row_floats + 12 + 9;
  const auto rows_in = [&](uint64_t other_bytes) {
    return std::max<uint64_t>(1, per_stripe > other_bytes
                                     ? (per_stripe - other_bytes) / row_cost
                                     : 0);
  };
  // The frequency sketch: 1-2 counters a resident row in each of its 4 rows
  // (4-8 bytes a resident row), aged after 10 sightings a resident row
  // (TinyLFU's sample). Simulated (by hand) on the Zipf benchmark: wider or
  // longer-lived sketches keep no better rows (docs/architecture.md).
  SpillBudget budget;
  budget.sketch_width =
      std::max<uint64_t>(64, absl::bit_floor(2 * rows_in(admission_bytes)));
  const uint64_t frequency_bytes = CountMinSketch::kDepth * budget.sketch_width;
  budget.max_resident_per_stripe = rows_in(admission_bytes + frequency_bytes);
  budget.sketch_sample = 10 * budget.max_resident_per_stripe;
  budget.max_tracked_keys_per_stripe = std::max<uint64_t>(
      kMinTrackedKeysPerStripe,
      reserve.tracked_key_bytes / kTrackedKeyBytes / spec.num_stripes);
  return budget;
}

void SpillWrites::clear() {
  put_keys.clear();
  put_records.clear();
  delete_keys.clear();
  metadata_keys.clear();
  access_metadata.clear();
}

absl::Status SettleSpill(TableCore& core, Stripe& stripe, SpillWrites& writes) {
  std::vector<RowId> victims;
  SelectVictims(core, stripe, victims);
  SpillState& spill = stripe.spill();
  for (RowId id : victims) {
    const RowHeader& header = stripe.Header(id);
    const uint64_t copy = stripe.SpillCopyMetadata(id);
    if (copy == Stripe::kNoCurrentCopy) {
      writes.put_keys.push_back(header.key);
      AppendCleanRecord(stripe.Record(id), core.record_bytes,
                        writes.put_records);
    } else {
      ++stripe.counters().spills_of_unchanged_rows;
      const uint64_t metadata = AccessMetadata(header);
      if (core.spec.eviction.ttl > 0 && copy != metadata) {
        writes.metadata_keys.push_back(header.key);
        writes.access_metadata.push_back(metadata);
      }
    }
  }
  if (!writes.empty()) {
    RETURN_IF_ERROR(core.spill->Write(
        writes.put_keys, writes.put_records.data(), writes.delete_keys,
        writes.metadata_keys, writes.access_metadata));
    ++spill.generation;
  }
  for (RowId id : victims) {
    const RowHeader& header = stripe.Header(id);
    if (header.access_word & kDirtyBit) {
      core.TrackChange(stripe, spill.dirty_keys, header.key);
    }
    stripe.FreeRow(id, KeyHash(header.key));
  }
  spill.spilled_rows += victims.size();
  stripe.counters().spills += victims.size();
  writes.clear();
  return absl::OkStatus();
}

void SelectVictims(const TableCore& core, Stripe& stripe,
                   std::vector<RowId>& victims) {
  SpillState& spill = stripe.spill();
  const uint64_t max_resident = core.max_resident_per_stripe;
  const uint64_t resident = stripe.index().size();
  if (resident <= max_resident) {
    // Filling up: no round to compete in soon; newcomers become rows like
    // any other.
    if (spill.newcomers.size() > max_resident / 4) spill.newcomers.clear();
    return;
  }
  const uint64_t target = max_resident - max_resident / 16;
  const uint64_t wanted = resident - target;
  const RowId used = stripe.used_rows();
  RowId hand = spill.clock_hand;
  for (uint64_t steps = 0; victims.size() < wanted && steps <= 2ull * used;
       ++steps) {
    if (hand >= used) hand = 0;
    RowHeader& header = stripe.MutableHeader(hand);
    if (header.last_touch != kFreeRowMark) {
      if (header.access_word & kReferencedBit) {
        header.access_word &= ~kReferencedBit;
      } else {
        // Chosen rows get the bit back as a mark, so that the hand's second
        // revolution does not choose them twice.
        victims.push_back(hand);
        header.access_word |= kReferencedBit;
      }
    }
    ++hand;
  }
  spill.clock_hand = hand;
  KeepFrequentRows(stripe, victims);
  spill.newcomers.clear();
}

// A row seen once (a one-off key, a scan) thus leaves again at the next
// round, instead of pushing out a row seen more often. Victims that stay
// keep their mark, the referenced bit: a second chance. A newcomer that
// leaves costs what any eviction does (a write if it changed in memory; a
// Pulled row's spill copy is current, so nothing).
void KeepFrequentRows(Stripe& stripe, std::vector<RowId>& victims) {
  SpillState& spill = stripe.spill();
  if (spill.frequency == nullptr || spill.newcomers.empty() ||
      victims.empty()) {
    return;
  }
  struct Candidate {
    uint32_t frequency;
    // Newcomers (0) leave before chosen rows (1) of the same frequency.
    uint32_t was_victim;
    RowId id;
    bool operator<(const Candidate& other) const {
      return frequency != other.frequency ? frequency < other.frequency
                                          : was_victim < other.was_victim;
    }
  };
  const auto frequency = [&](RowId id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return spill.frequency->Estimate(KeyHash(stripe.Header(id).key));
  };
  std::sort(victims.begin(), victims.end());
  std::vector<RowId>& newcomers = spill.newcomers;
  std::sort(newcomers.begin(), newcomers.end());
  newcomers.erase(std::unique(newcomers.begin(), newcomers.end()),
                  newcomers.end());
  std::vector<Candidate> candidates;
  candidates.reserve(victims.size() + newcomers.size());
  for (RowId id : victims) candidates.push_back({frequency(id), 1, id});
  for (RowId id : newcomers) {
    // Freed since it came in, or already chosen by the CLOCK.
    if (stripe.Header(id).last_touch == kFreeRowMark ||
        std::binary_search(victims.begin(), victims.end(), id)) {
      continue;
    }
    candidates.push_back({frequency(id), 0, id});
  }
  const size_t evict = victims.size();
  std::nth_element(candidates.begin(), candidates.begin() + evict,
                   candidates.end());
  for (size_t i = 0; i < evict; ++i) {
    victims[i] = candidates[i].id;
    stripe.counters().spills_of_newcomers += candidates[i].was_victim == 0;
  }
}

}  // namespace embedps::embedding_internal
