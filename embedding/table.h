// Table: the rows of one embedding table on one shard, in memory.
//
// Rows are created on first touch (as admission allows); keys are any
// uint64. Every operation is batched over spans: the table sorts a batch by
// lock stripe, takes each stripe's lock once per batch, and prefetches the
// index and rows ahead of use. Values and gradients are row-major:
// keys.size() rows of spec().dim floats.
//
// Memory layout (see docs/architecture.md): each stripe keeps rows in an
// arena of fixed-size chunks. A row is a 16-byte header (key, last touch,
// access count), the embedding, and the optimizer state, contiguous. The
// stripe's index is an absl::flat_hash_set of 4-byte row ids whose hash and
// equality read the key from the row, so a row costs 16 bytes of header plus
// about 5/load-factor bytes of index beyond its floats.
//
// Thread safety: all methods are thread-safe. Operations on different
// stripes run in parallel; a batch is atomic per stripe, not as a whole.
#ifndef EMBEDPS_EMBEDDING_TABLE_H_
#define EMBEDPS_EMBEDDING_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "embedding/table_spec.h"

namespace embedps::embedding {

// What the caller knows about the request.
struct AccessContext {
  // The caller's training step; rows touched record it as their last touch
  // when the table's TTL counts steps. Default: 0.
  uint64_t step = 0;
};

struct TableOptions {
  // Wall clock for TTLs in seconds; tests pass a fake one.
  // Default: absl::Now.
  std::function<absl::Time()> clock = [] { return absl::Now(); };
};

// Counters since the table was created; a snapshot, summed over stripes.
struct TableStats {
  uint64_t rows = 0;
  // Bytes held: row arenas, indexes, free lists and the admission sketch.
  uint64_t resident_bytes = 0;
  // rows × (dim + optimizer state) × 4: what the rows themselves need.
  uint64_t payload_bytes = 0;
  // From the spec; 0 = none. over_budget: resident_bytes > budget > 0.
  uint64_t memory_budget_bytes = 0;
  bool over_budget = false;
  // Rows created (admitted keys).
  uint64_t admitted = 0;
  // Pulls of keys without a row that admission did not admit (answered
  // with the initial vector, nothing stored).
  uint64_t admission_rejected = 0;
  // Gradients for keys without a row, dropped.
  uint64_t pushes_dropped = 0;
  // Rows removed by the TTL sweep, and by Erase.
  uint64_t evicted = 0;
  uint64_t erased = 0;
  // Keys in Pull, Push and Lookup batches, and the number of batches.
  uint64_t pulled_keys = 0;
  uint64_t pushed_keys = 0;
  uint64_t looked_up_keys = 0;
  uint64_t pull_requests = 0;
  uint64_t push_requests = 0;
  uint64_t lookup_requests = 0;
};

// One row as Scan shows it. Valid only during the visit.
struct RowView {
  uint64_t key;
  absl::Span<const float> embedding;
  absl::Span<const float> optimizer_state;
  // Pulls of this row (saturating), and its last touch (step or seconds
  // since the table was created, per the TTL unit).
  uint32_t access_count;
  uint32_t last_touch;
};

class Table {
 public:
  // INVALID_ARGUMENT (naming the field) if ValidateTableSpec rejects `spec`.
  static absl::StatusOr<std::unique_ptr<Table>> Create(
      const TableSpec& spec, TableOptions options = {});

  virtual ~Table() = default;

  virtual const TableSpec& spec() const = 0;

  // Writes the row of every key into `values`, creating rows for keys the
  // admission policy admits; a key not admitted gets its initial row and
  // nothing is stored. Duplicate keys are fine (each gets the row).
  // INVALID_ARGUMENT if values.size() != keys.size() * dim (nothing done).
  virtual absl::Status Pull(absl::Span<const uint64_t> keys,
                            absl::Span<float> values,
                            const AccessContext& context = {}) = 0;

  // Applies the optimizer to the row of every key. Gradients of duplicate
  // keys are summed (in batch order) and the optimizer is applied once per
  // distinct key. Gradients for keys without a row are dropped and counted,
  // except under AdmissionSpec::kAlways, which creates the row first.
  // INVALID_ARGUMENT, with nothing applied, if grads.size() !=
  // keys.size() * dim or any gradient is NaN or infinite.
  virtual absl::Status Push(absl::Span<const uint64_t> keys,
                            absl::Span<const float> grads,
                            const AccessContext& context = {}) = 0;

  // Read-only: writes the row of each key that has one into `values` and
  // sets found[i]; a miss gets zeros and found[i] = false. Never creates a
  // row or changes access metadata. Returns the number of keys found.
  // INVALID_ARGUMENT if the sizes do not match keys.size() (and ·dim).
  virtual absl::StatusOr<uint64_t> Lookup(absl::Span<const uint64_t> keys,
                                          absl::Span<float> values,
                                          absl::Span<bool> found) = 0;

  // Removes the rows of `keys` (absent keys are ignored); returns how many
  // rows were removed.
  virtual uint64_t Erase(absl::Span<const uint64_t> keys) = 0;

  // Removes rows untouched for longer than the spec's TTL (none when TTL is
  // off). Holds each stripe's lock for at most a few thousand rows at a
  // time, so concurrent Pulls and Pushes proceed. Returns rows removed.
  virtual uint64_t SweepExpired() = 0;

  // Calls `visit` for every row, one lock stripe at a time, under that
  // stripe's lock: `visit` must not call into this table. Rows changed by
  // concurrent writers may be seen before or after the change.
  virtual void Scan(absl::FunctionRef<void(const RowView&)> visit) const = 0;

  virtual TableStats Stats() const = 0;
};

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_TABLE_H_
