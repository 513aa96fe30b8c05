#include "embedding/internal/table_snapshot.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_macros.h"

namespace embedps::embedding_internal {
namespace {

// What TakeTableSnapshot copied: resident rows (and removed keys) sorted by
// key, plus, with a spill tier, a RocksDB snapshot for the spilled rows
// (all of them for a full snapshot, the changed ones for an incremental
// one).
class CopiedSnapshot final : public embedding::TableSnapshot {
 public:
  struct Entry {
    uint64_t key;
    // Into records_; kRemoved for a removed key.
    size_t offset;
  };
  static constexpr size_t kRemoved = SIZE_MAX;

  CopiedSnapshot(bool incremental, size_t record_bytes, uint32_t stripe_mask)
      : incremental_(incremental),
        record_bytes_(record_bytes),
        stripe_mask_(stripe_mask) {}

  uint32_t StripeOfKey(uint64_t key) const override {
    return StripeIndexOfHash(KeyHash(key), stripe_mask_);
  }
  bool incremental() const override { return incremental_; }
  size_t record_bytes() const override { return record_bytes_; }
  const std::vector<std::string>& admission_states() const override {
    return admission_states_;
  }
  uint64_t copied_rows() const override { return copied_rows_; }
  absl::Duration pause() const override { return pause_; }

  absl::Status ForEach(absl::FunctionRef<absl::Status(uint64_t, const char*)>
                           visit) const override {
    size_t next = 0;
    const auto emit_until = [&](uint64_t bound, bool inclusive) {
      while (next < entries_.size() &&
             (entries_[next].key < bound ||
              (inclusive && entries_[next].key == bound))) {
        const Entry& entry = entries_[next++];
        RETURN_IF_ERROR(visit(entry.key, entry.offset == kRemoved
                                             ? nullptr
                                             : records_.data() + entry.offset));
      }
      return absl::OkStatus();
    };
    if (spill_view_ != nullptr && !incremental_) {
      // Tiers hold disjoint keys: merge the two sorted streams.
      std::vector<char> clean(record_bytes_);
      RETURN_IF_ERROR(spill_view_->ForEach(
          [&](uint64_t key, const char* record) -> absl::Status {
            RETURN_IF_ERROR(emit_until(key, false));
            // A resident row's spill-tier copy is stale: memory wins.
            if (next < entries_.size() && entries_[next].key == key) {
              return absl::OkStatus();
            }
            std::memcpy(clean.data(), record, record_bytes_);
            ClearRecordFlags(clean.data());
            return visit(key, clean.data());
          }));
    }
    if (!spilled_dirty_keys_.empty()) {
      // The changed spilled rows, read from the pause's view in chunks as
      // they are merged in: memory for one chunk, not for all of them.
      constexpr size_t kChunk = 4096;
      std::vector<char> records(kChunk * record_bytes_);
      std::unique_ptr<bool[]> found(new bool[kChunk]);
      for (size_t first = 0; first < spilled_dirty_keys_.size();
           first += kChunk) {
        const absl::Span<const uint64_t> keys =
            absl::MakeConstSpan(spilled_dirty_keys_)
                .subspan(first,
                         std::min(kChunk, spilled_dirty_keys_.size() - first));
        RETURN_IF_ERROR(spill_view_->MultiGet(
            keys, records.data(), absl::MakeSpan(found.get(), keys.size())));
        for (size_t i = 0; i < keys.size(); ++i) {
          RETURN_IF_ERROR(emit_until(keys[i], false));
          if (!found[i]) continue;
          char* record = records.data() + i * record_bytes_;
          ClearRecordFlags(record);
          RETURN_IF_ERROR(visit(keys[i], record));
        }
      }
    }
    return emit_until(UINT64_MAX, true);
  }

  // Sized once: growing the buffers while paused would copy them.
  // `entries` rows and removed keys (records are reserved for all).
  void Reserve(size_t entries) {
    entries_.reserve(entries);
    records_.reserve(entries * record_bytes_);
  }
  // Appends a record (its access word stripped of flags).
  void AddRecord(uint64_t key, const char* record) {
    entries_.push_back(Entry{key, records_.size()});
    AppendCleanRecord(record, record_bytes_, records_);
  }
  void AddRemoved(uint64_t key) { entries_.push_back(Entry{key, kRemoved}); }
  void AddAdmissionState(std::string state) {
    admission_states_.push_back(std::move(state));
  }
  // Called at the end of the pause.
  void Paused(std::unique_ptr<SpillStore::ReadView> spill_view,
              absl::Duration pause) {
    copied_rows_ = entries_.size();
    spill_view_ = std::move(spill_view);
    pause_ = pause;
  }

  // After the pause: keeps the changed spilled rows' keys (incremental;
  // ForEach reads their rows from the pause's view) and sorts everything
  // by key. The two sets of keys are disjoint (a key is in one tier).
  void Finish(std::vector<uint64_t> spilled_dirty_keys) {
    spilled_dirty_keys_ = std::move(spilled_dirty_keys);
    std::sort(spilled_dirty_keys_.begin(), spilled_dirty_keys_.end());
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.key < b.key; });
  }

 private:
  const bool incremental_;
  const size_t record_bytes_;
  const uint32_t stripe_mask_;
  std::vector<Entry> entries_;
  std::vector<char> records_;
  std::vector<std::string> admission_states_;
  std::unique_ptr<SpillStore::ReadView> spill_view_;
  std::vector<uint64_t> spilled_dirty_keys_;
  uint64_t copied_rows_ = 0;
  absl::Duration pause_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<embedding::TableSnapshot>> TakeTableSnapshot(
    TableCore& core, bool incremental) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const bool first = !core.tracking_changes.load(std::memory_order_relaxed);
  std::vector<uint64_t> spilled_dirty;
  const absl::Time paused = absl::Now();
  for (auto& stripe : core.stripes) stripe->mu.Lock();
  // A stripe that stopped tracking its changes (too many for its budget)
  // makes the snapshot full.
  bool overflowed = false;
  for (auto& stripe : core.stripes) {
    overflowed = overflowed || stripe->spill().tracking_overflowed;
    stripe->spill().tracking_overflowed = false;
  }
  auto snapshot =
      std::make_unique<CopiedSnapshot>(incremental && !first && !overflowed,
                                       core.record_bytes, core.stripe_mask);
  const bool only_changed = snapshot->incremental();
  const auto copied = [only_changed](const RowHeader& header) {
    return header.last_touch != kFreeRowMark &&
           (!only_changed || (header.access_word & kDirtyBit));
  };
  // Sized exactly, also when only changed rows are copied: growing the
  // buffers would copy them while paused, and leave a trail of freed
  // blocks below malloc's mmap threshold on the heap (the process keeps
  // those pages; one buffer of the final size is mapped and unmapped
  // whole).
  size_t entries = 0;
  for (auto& stripe_ptr : core.stripes) {
    Stripe& stripe = *stripe_ptr;
    if (!only_changed) {
      entries += stripe.index().size();
      continue;
    }
    for (RowId id = 0; id < stripe.used_rows(); ++id) {
      if (copied(stripe.Header(id))) ++entries;
    }
    entries += stripe.spill().removed_keys.size();
  }
  snapshot->Reserve(entries);
  for (auto& stripe_ptr : core.stripes) {
    Stripe& stripe = *stripe_ptr;
    for (RowId id = 0; id < stripe.used_rows(); ++id) {
      RowHeader& header = stripe.MutableHeader(id);
      if (copied(header)) snapshot->AddRecord(header.key, stripe.Record(id));
      header.access_word &= ~kDirtyBit;
    }
    SpillState& spill = stripe.spill();
    if (only_changed) {
      spilled_dirty.insert(spilled_dirty.end(), spill.dirty_keys.begin(),
                           spill.dirty_keys.end());
      for (uint64_t key : spill.removed_keys) snapshot->AddRemoved(key);
    }
    spill.dirty_keys.clear();
    spill.removed_keys.clear();
    snapshot->AddAdmissionState(stripe.admission().SaveState());
  }
  std::unique_ptr<SpillStore::ReadView> spill_view;
  if (core.spill != nullptr) spill_view = core.spill->NewReadView();
  core.tracking_changes.store(true, std::memory_order_relaxed);
  for (auto it = core.stripes.rbegin(); it != core.stripes.rend(); ++it) {
    (*it)->mu.Unlock();
  }
  snapshot->Paused(std::move(spill_view), absl::Now() - paused);
  snapshot->Finish(std::move(spilled_dirty));
  return std::unique_ptr<embedding::TableSnapshot>(std::move(snapshot));
}

}  // namespace embedps::embedding_internal
