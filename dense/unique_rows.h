// UniqueRowsBatch: a batch whose bags name rows of per-table arrays of
// unique rows — what a worker holds once it has deduplicated a batch's keys
// and pulled each table's distinct keys once — and the host stages that
// serve it on a backend without its own: the gather of the rows into the
// bag layout of a Batch, and the sum of the per-key row gradients into one
// gradient per unique row (what the worker pushes).
//
// The CUDA backend runs the same two stages on the device (dense/cuda),
// so that only unique rows travel up and unique-row gradients down.
//
// Both stages split their work over `threads` threads, and both give
// results independent of the thread count: every unique row's gradient is
// summed in (slot, key) order.
//
// Thread safety: the functions keep no state; buffers are the caller's.
#ifndef EMBEDPS_DENSE_UNIQUE_ROWS_H_
#define EMBEDPS_DENSE_UNIQUE_ROWS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dense/model_spec.h"

namespace embedps::dense {

// Spans are borrowed for the duration of a call.
struct UniqueRowsBatch {
  int size = 0;
  absl::Span<const float> dense;   // size × num_dense
  absl::Span<const float> labels;  // size values in [0, 1]
  // Per table: its unique rows, row after row (rows × embedding_dim).
  std::vector<absl::Span<const float>> tables;
  struct Slot {
    int table = 0;
    // Per key of the slot's bags, bag after bag: its row in the table.
    absl::Span<const int32_t> index;
    // size + 1 entries: bag b is keys [offsets[b], offsets[b+1]).
    absl::Span<const int32_t> offsets;
    // Empty, or one weight per key: a weighted bag pools its rows each
    // times its weight.
    absl::Span<const float> weights;
  };
  std::vector<Slot> slots;  // one per slot of the spec
};

// INVALID_ARGUMENT, with the numbers, unless `batch` fits `spec`: one slot
// per spec slot, tables in range and whole rows, every index inside its
// table, offsets from 0 to the keys, non-decreasing, weights empty or one
// per key; labels are checked only when `with_labels`.
absl::Status ValidateUniqueRowsBatch(const ModelSpec& spec,
                                     const UniqueRowsBatch& batch,
                                     bool with_labels);

// INVALID_ARGUMENT unless there is one span per table of `batch`, each the
// size of its unique rows.
absl::Status ValidateTableGradients(
    const UniqueRowsBatch& batch,
    absl::Span<const absl::Span<float>> table_gradients);

// slot_rows[s] (index.size() × dim floats) = the rows of slot s's keys,
// each times its weight when the slot has weights.
// REQUIRES: ValidateUniqueRowsBatch passed; sizes as stated.
void GatherSlotRows(const UniqueRowsBatch& batch, int dim,
                    absl::Span<const absl::Span<float>> slot_rows, int threads);

// table_gradients[t][u] = Σ over the keys k of the slots of table t whose
// index is u, in (slot, key) order, of scale × weight(k) ×
// slot_gradients[s][k] (weight 1 without weights). Every unique row is
// written (zeros for one no key names).
// REQUIRES: ValidateUniqueRowsBatch and ValidateTableGradients passed;
// slot_gradients[s] has index.size() × dim floats.
void SumUniqueRowGradients(
    const UniqueRowsBatch& batch, int dim,
    absl::Span<const absl::Span<const float>> slot_gradients, float scale,
    absl::Span<const absl::Span<float>> table_gradients, int threads);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_UNIQUE_ROWS_H_
