// A batch's work on one stripe, under that stripe's lock: the Pull, Push
// and Lookup of the keys the batch has in the stripe (a "group": grouped
// positions [begin, end) of a BatchScratch), and the row creation,
// promotion and update they need.
//
// The loops keep three stages in flight: the index slots of key j+16 are
// prefetched, key j+8 is found by fingerprint and its row fetched, and key
// j's row is used (its key checked first; a row of another key with the
// same fingerprint sends the key to an exact lookup).
//
// With a spill tier a first pass defers the keys without a resident row
// (MissPolicy::defer); the second pass gets their spilled records
// (MissPolicy::fetched) and promotes them (batch_pipeline.h).
//
// Thread safety: every function requires the stripe's lock (exclusive, but
// for LookupGroup, which takes it shared).
#ifndef EMBEDPS_EMBEDDING_INTERNAL_STRIPE_BATCH_H_
#define EMBEDPS_EMBEDDING_INTERNAL_STRIPE_BATCH_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/internal/push_undo.h"
#include "embedding/internal/spill_store.h"
#include "embedding/internal/stripe.h"
#include "embedding/internal/table_core.h"

namespace embedps::embedding_internal {

// Rows read from the spill tier for one request: key -> record.
class FetchedRows {
 public:
  explicit FetchedRows(size_t record_bytes) : record_bytes_(record_bytes) {}

  // Reads `keys` (distinct) in one MultiGet; found ones replace what was
  // fetched before, missing ones are forgotten. Errors from the spill tier.
  absl::Status Fetch(SpillStore& store, absl::Span<const uint64_t> keys);

  // The record of `key`, or null if it is not spilled.
  const char* Find(uint64_t key) const {
    auto it = offset_.find(key);
    return it == offset_.end() ? nullptr : records_.data() + it->second;
  }

 private:
  const size_t record_bytes_;
  std::vector<char> records_;
  std::vector<char> found_;  // bools; std::vector<bool> has no data()
  absl::flat_hash_map<uint64_t, size_t> offset_;
};

// How a pass over a stripe's group treats keys without a resident row.
struct MissPolicy {
  // First pass with a spill tier: record the batch position here and leave
  // the key for the second pass.
  std::vector<uint32_t>* defer = nullptr;
  // Second pass: spilled rows to promote.
  const FetchedRows* fetched = nullptr;

  const char* Spilled(uint64_t key) const {
    return fetched == nullptr ? nullptr : fetched->Find(key);
  }
};

// Pull of a group: writes each key's embedding to values[position * dim],
// creating rows as admission allows (a key not admitted gets its initial
// row and nothing is stored), promoting spilled rows, and recording the
// touch. Errors: RESOURCE_EXHAUSTED if the stripe cannot grow.
absl::Status PullGroup(const TableCore& core, Stripe& stripe,
                       absl::Span<const uint64_t> keys,
                       absl::Span<float> values, BatchScratch& scratch,
                       uint32_t begin, uint32_t end, uint32_t touch,
                       const MissPolicy& policy)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

// Push of a group: applies the optimizer once per distinct key (gradients
// of repeated keys summed in batch order); keys without a row are dropped
// and counted, or created under kAlways admission. Every update is logged
// in `undo`; at the first result that is not finite the group stops and
// the log is refused. Does nothing if the log is refused already.
absl::Status PushGroup(const TableCore& core, Stripe& stripe,
                       absl::Span<const uint64_t> keys,
                       absl::Span<const float> grads, BatchScratch& scratch,
                       uint32_t begin, uint32_t end, uint32_t touch,
                       const MissPolicy& policy, PushUndoLog& undo)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

// What a read-only pass copies of each row it finds: `bytes` bytes of the
// row's record (row_layout.h) from byte `from` on, to out + position *
// bytes. Lookup copies the embedding (from 8), ReadRecords the record.
struct RowCopy {
  char* out;
  size_t from;
  size_t bytes;
};

// Read-only first pass of a Lookup or ReadRecords: copies resident rows,
// sets found[pos], zero-fills the others and defers them to `policy.defer`
// if set. Returns the keys found.
uint64_t LookupGroup(const TableCore& core, const Stripe& stripe,
                     absl::Span<const uint64_t> keys, const RowCopy& copy,
                     absl::Span<bool> found, BatchScratch& scratch,
                     uint32_t begin, uint32_t end, const MissPolicy& policy)
    ABSL_SHARED_LOCKS_REQUIRED(stripe.mu);

// WriteRecords of a group: the embedding and optimizer state of each key's
// row (promoted if spilled) become its record's, the record's access count
// adds to the row's (saturating); the row counts as touched at `touch` and
// changed (snapshots, change log). Keys without a row are skipped (a
// second pass looks for deferred ones). Sets written[pos].
absl::Status WriteGroup(const TableCore& core, Stripe& stripe,
                        absl::Span<const uint64_t> keys,
                        absl::Span<const char> records, BatchScratch& scratch,
                        uint32_t begin, uint32_t end, uint32_t touch,
                        const MissPolicy& policy, absl::Span<bool> written)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_STRIPE_BATCH_H_
