#include "embedding/internal/push_undo.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "embedding/internal/row_layout.h"
#include "embedding/internal/stripe_batch.h"
#include "embedding/internal/table_core.h"

namespace embedps::embedding_internal {
namespace {

// A record starts with last touch and access count (RowRecordBytes).
constexpr size_t kRecordMetadataBytes = 8;

}  // namespace

void PushUndoLog::Reset(int32_t payload_floats, bool logged) {
  payload_floats_ = payload_floats;
  logged_ = logged;
  refused_ = false;
  saw_large_value_ = false;
  updates_ = 0;
  current_before_.resize(static_cast<size_t>(payload_floats));
  refused_result_.clear();
  entries_.clear();
  before_.clear();
  after_.clear();
  created_.clear();
}

bool PushUndoLog::Refuse(float* payload) {
  refused_ = true;
  refused_result_.assign(payload, payload + payload_floats_);
  if (!logged_) {
    std::memcpy(payload, current_before_.data(),
                sizeof(float) * payload_floats_);
  }
  return false;
}

absl::StatusOr<uint64_t> PushUndoLog::RollBack(TableCore& core) {
  const size_t bytes = sizeof(float) * payload_floats_;
  uint64_t not_restored = 0;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& entry = entries_[i];
    const float* before = before_.data() + i * payload_floats_;
    const float* after = after_.data() + i * payload_floats_;
    const bool created = created_.contains(entry.key);
    Stripe& stripe = *core.stripes[entry.stripe];
    MutexLock lock(&stripe.mu);
    const uint64_t hash = KeyHash(entry.key);
    const RowId id = stripe.Find(KeyProbe{entry.key, hash});
    if (id != kNoRow) {
      float* payload = stripe.Row(id) + kHeaderFloats;
      if (std::memcmp(payload, after, bytes) != 0) {
        ++not_restored;
      } else if (created) {
        stripe.FreeRow(id, hash);
        core.NoteRemoved(stripe, entry.key);
      } else {
        std::memcpy(payload, before, bytes);
        stripe.ForgetSpillCopy(id);
        core.LogChange(stripe, entry.key);
      }
      continue;
    }
    // Evicted to the spill tier since the update (a resident row always
    // wins, so the spilled copy is the row).
    const char* record = nullptr;
    FetchedRows fetched(core.record_bytes);
    if (core.spill != nullptr) {
      RETURN_IF_ERROR(fetched.Fetch(*core.spill, {entry.key}));
      record = fetched.Find(entry.key);
    }
    if (record == nullptr ||
        std::memcmp(record + kRecordMetadataBytes, after, bytes) != 0) {
      ++not_restored;
      continue;
    }
    if (created) {
      RETURN_IF_ERROR(core.spill->Write({}, nullptr, {entry.key}));
      --stripe.spill().spilled_rows;
      stripe.spill().dirty_keys.erase(entry.key);
      core.NoteRemoved(stripe, entry.key);
      continue;
    }
    std::vector<char> restored(record, record + core.record_bytes);
    std::memcpy(restored.data() + kRecordMetadataBytes, before, bytes);
    RETURN_IF_ERROR(core.spill->Write({entry.key}, restored.data(), {}));
    core.LogChange(stripe, entry.key);
  }
  return not_restored;
}

absl::Status PushUndoLog::RefusalStatus(const std::string& table,
                                        uint64_t not_restored) const {
  int32_t first_bad = 0;
  while (first_bad < payload_floats_ &&
         std::isfinite(refused_result_[first_bad])) {
    ++first_bad;
  }
  std::string kept;
  if (!logged_ && updates_ > 0) {
    kept = absl::StrCat(
        "; the ", updates_,
        " rows updated before it keep their update (their table held no "
        "value beyond 2^64 and no gradient was beyond 2^16, so the push was "
        "not logged: see embedding/internal/push_undo.h)");
  } else if (not_restored > 0) {
    kept = absl::StrCat("; ", not_restored,
                        " rows a concurrent push updated meanwhile keep this "
                        "push's update too");
  } else {
    kept = "; nothing was applied";
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "Push of table '", table, "': the update of key ", current_.key,
      " would make float ", first_bad,
      " of its row (embedding, then optimizer state) ",
      refused_result_[first_bad],
      " (gradients too large for the optimizer); the push is refused", kept));
}

}  // namespace embedps::embedding_internal
