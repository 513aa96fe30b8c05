#include "embedding/internal/stripe.h"

#include <algorithm>
#include <utility>

namespace embedps::embedding_internal {

Stripe::Stripe(int32_t row_floats, bool huge_pages,
               std::unique_ptr<AdmissionFilter> admission)
    : arena_(static_cast<size_t>(row_floats) * sizeof(float), huge_pages),
      index_(0, RowHash{this}, RowEq{this}),
      admission_(std::move(admission)) {}

void Stripe::NoteCurrentSpillCopy(RowId id, uint64_t copy_metadata) {
  if (spill_copy_metadata_.size() < used_rows_) {
    // Grown by an eighth, not doubled: the budget counts 9 bytes a row.
    if (spill_copy_metadata_.capacity() < used_rows_) {
      spill_copy_metadata_.reserve(used_rows_ + used_rows_ / 8);
    }
    spill_copy_metadata_.resize(used_rows_, kNoCurrentCopy);
  }
  spill_copy_metadata_[id] = copy_metadata;
}

uint64_t Stripe::ResidentBytes() const {
  // absl's index: one slot and one control byte per capacity, plus a
  // group's worth of cloned control bytes.
  const uint64_t index_bytes =
      index_.capacity() == 0 ? 0
                             : index_.capacity() * (sizeof(IndexSlot) + 1) + 16;
  const uint64_t row_bytes =
      uint64_t{used_rows_} *
      (arena_.reserved_bytes() / std::max<uint64_t>(arena_.capacity(), 1));
  const uint64_t frequency_bytes =
      spill_.frequency == nullptr
          ? 0
          : spill_.frequency->bytes() +
                spill_.newcomers.capacity() * sizeof(RowId);
  const uint64_t tracked_bytes =
      (spill_.dirty_keys.capacity() + spill_.removed_keys.capacity()) *
      (sizeof(uint64_t) + 1);
  return row_bytes + index_bytes + tracked_bytes +
         free_rows_.capacity() * sizeof(RowId) +
         spill_copy_metadata_.capacity() * sizeof(uint64_t) +
         admission_->bytes() + frequency_bytes +
         changes_.capacity() * sizeof(uint64_t);
}

}  // namespace embedps::embedding_internal
