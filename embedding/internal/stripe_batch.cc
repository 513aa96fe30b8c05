#include "embedding/internal/stripe_batch.h"

#include <algorithm>
#include <cstring>

#include "common/status_macros.h"
#include "embedding/initializer.h"

namespace embedps::embedding_internal {
namespace {

// How far ahead of use batched loops prefetch.
constexpr uint32_t kIndexPrefetchDistance = 16;
constexpr uint32_t kRowPrefetchDistance = 8;

// How much of a row an operation reads: a Pull only the header and the
// values, an update the optimizer state too.
enum class RowPart { kValues, kWhole };

// Prefetches the cache lines of the row's `part` from `from_byte` on.
void PrefetchRow(const TableCore& core, const Stripe& stripe, RowId id,
                 RowPart part, bool for_write, size_t from_byte)
    ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
  const char* row = reinterpret_cast<const char*>(stripe.Row(id));
  const size_t end =
      sizeof(float) * (part == RowPart::kValues
                           ? static_cast<size_t>(kHeaderFloats + core.dim)
                           : static_cast<size_t>(core.row_floats));
  for (size_t offset = from_byte; offset < end; offset += 64) {
    if (for_write) {
      PrefetchWrite(row + offset);
    } else {
      PrefetchRead(row + offset);
    }
  }
}

// The row whose index slot matches `hash`'s fingerprint, or kNoRow; the
// row's `part` (header included) is prefetched. No row is read: the caller
// checks the key in the header when it uses the row.
RowId FindByFingerprint(const TableCore& core, const Stripe& stripe,
                        uint64_t hash, RowPart part, bool for_write)
    ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
  const RowIndex& index = stripe.index();
  auto it = index.find(FingerprintProbe{hash}, hash);
  if (it == index.end()) return kNoRow;
  PrefetchRow(core, stripe, it->id(), part, for_write, /*from_byte=*/0);
  return it->id();
}

// Finds the row of each grouped position in [begin, end) into scratch.rows
// (kNoRow when absent), prefetching index slots and the rows' `part`.
void FindRows(const TableCore& core, const Stripe& stripe,
              absl::Span<const uint64_t> keys, BatchScratch& scratch,
              uint32_t begin, uint32_t end, RowPart part, bool for_write)
    ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
  const RowIndex& index = stripe.index();
  const auto key_at = [&](uint32_t j) { return keys[scratch.order[j]]; };
  const auto find_by_fingerprint =
      [&](uint32_t j) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        scratch.rows[j] =
            FindByFingerprint(core, stripe, scratch.hashes[j], part, for_write);
      };
  for (uint32_t j = begin; j < std::min(end, begin + kIndexPrefetchDistance);
       ++j) {
    index.prefetch(KeyProbe{key_at(j), scratch.hashes[j]});
  }
  for (uint32_t j = begin; j < std::min(end, begin + kRowPrefetchDistance);
       ++j) {
    find_by_fingerprint(j);
  }
  for (uint32_t j = begin; j < end; ++j) {
    if (j + kIndexPrefetchDistance < end) {
      const uint32_t ahead = j + kIndexPrefetchDistance;
      index.prefetch(KeyProbe{key_at(ahead), scratch.hashes[ahead]});
    }
    if (j + kRowPrefetchDistance < end) {
      find_by_fingerprint(j + kRowPrefetchDistance);
    }
    const RowId id = scratch.rows[j];
    if (id == kNoRow || stripe.Header(id).key == key_at(j)) continue;
    scratch.rows[j] = stripe.Find(KeyProbe{key_at(j), scratch.hashes[j]});
  }
}

// A new row for `key` with its initial values and optimizer state.
absl::StatusOr<RowId> CreateRow(const TableCore& core, Stripe& stripe,
                                uint64_t key, uint32_t touch)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
  ASSIGN_OR_RETURN(const RowId id, stripe.AllocateRow(key, touch));
  float* row = stripe.Row(id);
  embedding::InitialRow(core.spec.initializer, core.spec.seed, key,
                        absl::MakeSpan(row + kHeaderFloats, core.dim));
  core.optimizer->InitState(row + kHeaderFloats + core.dim);
  stripe.MutableHeader(id).access_word = kDirtyBit | kReferencedBit;
  stripe.IndexRow(id);
  ++stripe.counters().admitted;
  core.LogChange(stripe, key);
  SpillState& spill = stripe.spill();
  if (!spill.removed_keys.empty()) spill.removed_keys.erase(key);
  if (spill.frequency != nullptr) spill.newcomers.push_back(id);
  return id;
}

// Moves a spilled row back into memory. Its spill-tier copy stays: a
// resident row always wins, and removals delete the copy. Until the row's
// embedding or optimizer state changes the copy is current, and evicting
// the row writes nothing (SettleSpill); after a change the eviction
// overwrites it. Keeping the copy halves the spill tier's writes, and rows
// that were only read cost none.
absl::StatusOr<RowId> PromoteRow(const TableCore& core, Stripe& stripe,
                                 uint64_t key, const char* record)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
  ASSIGN_OR_RETURN(const RowId id, stripe.AllocateRow(key, 0));
  std::memcpy(stripe.Record(id), record, core.record_bytes);
  RowHeader& header = stripe.MutableHeader(id);
  SpillState& spill = stripe.spill();
  header.access_word = (header.access_word & kCountMask) | kReferencedBit;
  if (spill.dirty_keys.erase(key) > 0) header.access_word |= kDirtyBit;
  stripe.IndexRow(id);
  stripe.NoteCurrentSpillCopy(id, AccessMetadata(header));
  --spill.spilled_rows;
  ++stripe.counters().promotions;
  spill.newcomers.push_back(id);
  return id;
}

// Applies one update, logged in `undo`; false if its result is not finite
// (the row holds it until the Push rolls back).
bool ApplyToRow(const TableCore& core, Stripe& stripe, uint32_t stripe_index,
                RowId id, const float* grad, uint32_t touch, PushUndoLog& undo)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
  float* row = stripe.Row(id);
  RowHeader& header = stripe.MutableHeader(id);
  undo.Before(stripe_index, header.key, row + kHeaderFloats);
  core.optimizer->Apply(row + kHeaderFloats, row + kHeaderFloats + core.dim,
                        grad);
  stripe.ForgetSpillCopy(id);
  header.last_touch = touch;
  header.access_word |= kDirtyBit | kReferencedBit;
  core.LogChange(stripe, header.key);
  return undo.After(row + kHeaderFloats);
}

}  // namespace

absl::Status FetchedRows::Fetch(SpillStore& store,
                                absl::Span<const uint64_t> keys) {
  if (keys.empty()) return absl::OkStatus();
  const size_t base = records_.size();
  records_.resize(base + keys.size() * record_bytes_);
  found_.assign(keys.size(), false);
  bool* found = reinterpret_cast<bool*>(found_.data());
  RETURN_IF_ERROR(store.MultiGet(keys, records_.data() + base,
                                 absl::MakeSpan(found, keys.size())));
  for (size_t i = 0; i < keys.size(); ++i) {
    if (found[i]) {
      offset_[keys[i]] = base + i * record_bytes_;
    } else {
      offset_.erase(keys[i]);
    }
  }
  return absl::OkStatus();
}

absl::Status PullGroup(const TableCore& core, Stripe& stripe,
                       absl::Span<const uint64_t> keys,
                       absl::Span<float> values, BatchScratch& scratch,
                       uint32_t begin, uint32_t end, uint32_t touch,
                       const MissPolicy& policy) {
  const int32_t dim = core.dim;
  const auto probe_at = [&](uint32_t j) {
    return KeyProbe{keys[scratch.order[j]], scratch.hashes[j]};
  };
  const auto find_and_prefetch =
      [&](uint32_t j) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        // Checked against the key when it is used.
        scratch.rows[j] =
            FindByFingerprint(core, stripe, scratch.hashes[j], RowPart::kValues,
                              /*for_write=*/false);
        // Batch order is not stripe order: the output rows are written at
        // scattered positions, so fetch their lines for writing too.
        const char* out = reinterpret_cast<const char*>(
            values.data() + static_cast<size_t>(scratch.order[j]) * dim);
        for (size_t offset = 0; offset < sizeof(float) * dim; offset += 64) {
          PrefetchWrite(out + offset);
        }
      };
  for (uint32_t j = begin; j < std::min(end, begin + kIndexPrefetchDistance);
       ++j) {
    stripe.index().prefetch(probe_at(j));
  }
  for (uint32_t j = begin; j < std::min(end, begin + kRowPrefetchDistance);
       ++j) {
    find_and_prefetch(j);
  }
  for (uint32_t j = begin; j < end; ++j) {
    if (j + kIndexPrefetchDistance < end) {
      stripe.index().prefetch(probe_at(j + kIndexPrefetchDistance));
    }
    if (j + kRowPrefetchDistance < end) {
      find_and_prefetch(j + kRowPrefetchDistance);
    }
    const uint32_t pos = scratch.order[j];
    float* out = values.data() + static_cast<size_t>(pos) * dim;
    RowId id = scratch.rows[j];
    // Another key with the same fingerprint: look the key up exactly.
    if (id != kNoRow && stripe.Header(id).key != keys[pos]) id = kNoRow;
    if (id == kNoRow) {
      // Absent when found, but an earlier duplicate in this batch may have
      // created it since.
      id = stripe.Find(KeyProbe{keys[pos], scratch.hashes[j]});
    }
    if (id == kNoRow) {
      const uint64_t key = keys[pos];
      if (policy.defer != nullptr) {
        policy.defer->push_back(pos);
        continue;
      }
      if (const char* record = policy.Spilled(key)) {
        ASSIGN_OR_RETURN(id, PromoteRow(core, stripe, key, record));
      } else if (stripe.admission().RecordSighting(key)) {
        ASSIGN_OR_RETURN(id, CreateRow(core, stripe, key, touch));
      } else {
        ++stripe.counters().admission_rejected;
        embedding::InitialRow(core.spec.initializer, core.spec.seed, key,
                              absl::MakeSpan(out, dim));
        continue;
      }
    }
    RowHeader& header = stripe.MutableHeader(id);
    header.last_touch = touch;
    uint32_t word = header.access_word;
    if ((word & kCountMask) != kCountMask) ++word;
    header.access_word = word | kReferencedBit;
    std::memcpy(out, stripe.Row(id) + kHeaderFloats, sizeof(float) * dim);
  }
  return absl::OkStatus();
}

absl::Status PushGroup(const TableCore& core, Stripe& stripe,
                       absl::Span<const uint64_t> keys,
                       absl::Span<const float> grads, BatchScratch& scratch,
                       uint32_t begin, uint32_t end, uint32_t touch,
                       const MissPolicy& policy, PushUndoLog& undo) {
  if (undo.refused()) return absl::OkStatus();
  const int32_t dim = core.dim;
  const uint32_t stripe_index = core.StripeIndex(scratch.hashes[begin]);
  FindRows(core, stripe, keys, scratch, begin, end, RowPart::kWhole,
           /*for_write=*/true);
  const bool create_missing =
      core.spec.admission.kind == embedding::AdmissionSpec::Kind::kAlways;
  for (uint32_t j = begin; j < end; ++j) {
    if (scratch.rows[j] != kNoRow) continue;
    const uint64_t key = keys[scratch.order[j]];
    const RowId existing = stripe.Find(KeyProbe{key, scratch.hashes[j]});
    if (existing != kNoRow) {
      scratch.rows[j] = existing;  // created by an earlier duplicate
    } else if (policy.defer != nullptr) {
      policy.defer->push_back(scratch.order[j]);
    } else if (const char* record = policy.Spilled(key)) {
      ASSIGN_OR_RETURN(scratch.rows[j], PromoteRow(core, stripe, key, record));
    } else if (create_missing) {
      ASSIGN_OR_RETURN(scratch.rows[j], CreateRow(core, stripe, key, touch));
      undo.NoteCreated(key);
    } else {
      ++stripe.counters().pushes_dropped;
    }
  }
  // Duplicates: a row id marked twice in `seen` is named more than once;
  // `repeated` marks those rows. Both bitmaps are cleared on the way out.
  const size_t words = (static_cast<size_t>(stripe.used_rows()) + 63) / 64;
  if (scratch.seen_rows.size() < words) {
    scratch.seen_rows.resize(words, 0);
    scratch.repeated_rows.resize(words, 0);
  }
  uint64_t* seen = scratch.seen_rows.data();
  uint64_t* repeated = scratch.repeated_rows.data();
  bool any_repeated = false;
  for (uint32_t j = begin; j < end; ++j) {
    const RowId id = scratch.rows[j];
    if (id == kNoRow) continue;
    const uint64_t bit = uint64_t{1} << (id & 63);
    if (seen[id >> 6] & bit) {
      repeated[id >> 6] |= bit;
      any_repeated = true;
    }
    seen[id >> 6] |= bit;
  }
  // Rows named once get their gradient directly; repeated rows sum their
  // gradients in batch order (0 + g1 + g2 ... equals g1 + g2 ... exactly)
  // and get one update at the end.
  scratch.repeated_slot.clear();
  scratch.repeated_sums.clear();
  for (uint32_t j = begin; j < end; ++j) {
    const RowId id = scratch.rows[j];
    if (id == kNoRow) continue;
    const float* grad =
        grads.data() + static_cast<size_t>(scratch.order[j]) * dim;
    if (!any_repeated || !(repeated[id >> 6] & (uint64_t{1} << (id & 63)))) {
      if (!ApplyToRow(core, stripe, stripe_index, id, grad, touch, undo)) {
        break;
      }
      continue;
    }
    auto [it, inserted] =
        scratch.repeated_slot.try_emplace(id, scratch.repeated_slot.size());
    if (inserted) {
      scratch.repeated_sums.resize(scratch.repeated_sums.size() + dim, 0.0f);
    }
    float* sum = scratch.repeated_sums.data() + it->second * dim;
    for (int32_t d = 0; d < dim; ++d) sum[d] += grad[d];
  }
  if (!undo.refused()) {
    for (const auto& [id, slot] : scratch.repeated_slot) {
      if (!ApplyToRow(core, stripe, stripe_index, id,
                      scratch.repeated_sums.data() + slot * dim, touch, undo)) {
        break;
      }
    }
  }
  for (uint32_t j = begin; j < end; ++j) {
    const RowId id = scratch.rows[j];
    if (id == kNoRow) continue;
    seen[id >> 6] = 0;
    repeated[id >> 6] = 0;
  }
  return absl::OkStatus();
}

uint64_t LookupGroup(const TableCore& core, const Stripe& stripe,
                     absl::Span<const uint64_t> keys, const RowCopy& copy,
                     absl::Span<bool> found, BatchScratch& scratch,
                     uint32_t begin, uint32_t end, const MissPolicy& policy) {
  const RowPart part = copy.bytes > sizeof(float) * core.dim ? RowPart::kWhole
                                                             : RowPart::kValues;
  FindRows(core, stripe, keys, scratch, begin, end, part, /*for_write=*/false);
  uint64_t hits = 0;
  for (uint32_t j = begin; j < end; ++j) {
    const uint32_t pos = scratch.order[j];
    char* out = copy.out + static_cast<size_t>(pos) * copy.bytes;
    const RowId id = scratch.rows[j];
    found[pos] = id != kNoRow;
    if (found[pos]) {
      std::memcpy(out, stripe.Record(id) + copy.from, copy.bytes);
      ++hits;
    } else {
      std::memset(out, 0, copy.bytes);
      if (policy.defer != nullptr) policy.defer->push_back(pos);
    }
  }
  return hits;
}

absl::Status WriteGroup(const TableCore& core, Stripe& stripe,
                        absl::Span<const uint64_t> keys,
                        absl::Span<const char> records, BatchScratch& scratch,
                        uint32_t begin, uint32_t end, uint32_t touch,
                        const MissPolicy& policy, absl::Span<bool> written) {
  FindRows(core, stripe, keys, scratch, begin, end, RowPart::kWhole,
           /*for_write=*/true);
  for (uint32_t j = begin; j < end; ++j) {
    const uint32_t pos = scratch.order[j];
    RowId id = scratch.rows[j];
    if (id == kNoRow) {
      const uint64_t key = keys[pos];
      if (policy.defer != nullptr) {
        policy.defer->push_back(pos);
        continue;
      }
      const char* spilled = policy.Spilled(key);
      if (spilled == nullptr) continue;  // erased or evicted: not recreated
      ASSIGN_OR_RETURN(id, PromoteRow(core, stripe, key, spilled));
    }
    const char* record =
        records.data() + static_cast<size_t>(pos) * core.record_bytes;
    std::memcpy(stripe.Record(id) + 8, record + 8, core.record_bytes - 8);
    stripe.ForgetSpillCopy(id);
    RowHeader& header = stripe.MutableHeader(id);
    header.last_touch = touch;
    // The record's count (the pulls a tier served) adds to the row's.
    uint32_t added;
    std::memcpy(&added, record + 4, sizeof(added));
    const uint32_t count = header.access_word & kCountMask;
    const uint32_t sum =
        count + std::min<uint32_t>(added & kCountMask, kCountMask - count);
    header.access_word =
        (header.access_word & ~kCountMask) | sum | kDirtyBit | kReferencedBit;
    core.LogChange(stripe, header.key);
    written[pos] = true;
  }
  return absl::OkStatus();
}

}  // namespace embedps::embedding_internal
