// HotRows: a job's hot-row tier on one worker (docs/architecture.md "Hot
// rows").
//
// Per table it holds the rows of a fixed set of keys (the ones the job's
// workers use most) with their optimizer state, as the servers keep them
// (embedding::RowRecordBytes records). A step takes those rows from here
// instead of Pulling them, and their gradient sums update them here with
// the optimizer the servers would apply (embedding::RowOptimizer of the
// same spec: one update per touched row per step) instead of being
// Pushed. In a job of several workers every worker holds the same rows and
// applies the same sums (the touched rows gathered from every worker), so
// the copies stay
// equal, bit for bit, and equal what SYNC servers would hold up to the
// order of the sum.
//
// Thread safety: Split reads only the key sets, which change only in
// Assign: it may run on another thread (the job's next batch being
// prepared) while Gather and Apply run on the training thread.
// Everything else is one thread's.
#ifndef EMBEDPS_WORKER_HOT_ROWS_H_
#define EMBEDPS_WORKER_HOT_ROWS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "dense/collective/communicator.h"
#include "embedding/optimizer.h"
#include "embedding/table_spec.h"

namespace embedps::worker {

class HotRows {
 public:
  // `specs`: the job's tables in its table order (their servers' specs).
  // Gather and Apply split large steps over up to `threads` threads.
  explicit HotRows(const std::vector<embedding::TableSpec>& specs,
                   int threads = 1);

  int num_tables() const { return static_cast<int>(tables_.size()); }
  // Bytes a row of `spec` takes here: its record and a gradient sum.
  static size_t BytesPerRow(const embedding::TableSpec& spec);

  // Table `t` holds `keys` (distinct) with `records` (ReadRows' records,
  // one per key): the set of the table from now on. INVALID_ARGUMENT if
  // the sizes disagree, a key repeats or a float is not finite (nothing
  // changes then).
  absl::Status Assign(int t, std::vector<uint64_t> keys,
                      absl::Span<const char> records);

  // The keys of table `t`, in their slot order, and their records (the
  // write-back): each record's access count is the uses the tier served
  // since Assign or ClearCounts (a row touched by a step counts once per
  // worker that touched it, as its Pulls would have), its last touch 0.
  absl::Span<const uint64_t> keys(int t) const { return tables_[t].keys; }
  absl::Span<const char> records(int t) const;
  // The keys of table `t` the tier used since Assign or ClearCounts, and
  // their records (as records()): the rows a write-back must send; the
  // others hold what their shard holds.
  void UsedRecords(int t, std::vector<uint64_t>& keys,
                   std::vector<char>& records) const;
  // After a write-back: the counts start over.
  void ClearCounts(int t);
  size_t record_bytes(int t) const { return tables_[t].record_bytes; }

  // Moves the hot keys of `unique` (table `t`'s distinct keys of a step)
  // behind the others, each part keeping its order. remap[i]: the new
  // position of old position i (empty when nothing moved); slots[j]: the
  // slot of the j-th hot key. Returns the number of other keys.
  size_t Split(int t, std::vector<uint64_t>& unique,
               std::vector<int32_t>& remap, std::vector<int32_t>& slots) const;

  // Writes the embeddings of `slots` of table `t` to `rows`
  // (slots.size() × dim floats).
  void Gather(int t, absl::Span<const int32_t> slots,
              absl::Span<float> rows) const;

  // One step's gradient sums of every table: grads[t] holds one row of
  // dim floats per slot of slots[t] (distinct slots). With one worker
  // (`communicator` null or of world size 1) each row gets one update;
  // with several, the sums of every worker are added first and every row
  // some worker touched gets one update. The workers exchange only the
  // rows they touched (two AllGathers: the counts, then each worker's
  // touched slots and sums padded to the most any worker has), so a step
  // moves what the workers touched, not the tier: all workers must call
  // Apply at the same step. Sums are added in rank order. Errors only from
  // the AllGathers.
  absl::Status Apply(absl::Span<const absl::Span<const int32_t>> slots,
                     absl::Span<const absl::Span<const float>> grads,
                     dense::Communicator* communicator);

 private:
  struct Table {
    embedding::TableSpec spec;
    std::unique_ptr<embedding::RowOptimizer> optimizer;
    int32_t dim = 0;
    size_t record_bytes = 0;
    size_t record_floats = 0;  // record_bytes / 4
    std::vector<uint64_t> keys;
    absl::flat_hash_map<uint64_t, int32_t> slot_of_key;
    // Records, as floats (the first two hold the 8 bytes of metadata).
    std::vector<float> records;
  };
  // One update of `slot`, used by `uses` workers.
  void ApplyRow(Table& table, int32_t slot, const float* grad, uint32_t uses);
  // Calls work(t, begin, end) over [0, sizes[t]) of every table, in pieces
  // spread over the threads when there are enough.
  void ForEachPiece(const std::vector<size_t>& sizes,
                    const std::function<void(int, size_t, size_t)>& work) const;

  const int threads_;
  std::vector<Table> tables_;
  // Several workers: what the AllGathers carry, and per table the rows
  // touched in a step (position of a slot in them, -1 for none; reset
  // after each step), their sums and uses.
  std::vector<float> local_, gathered_;
  struct Touched {
    std::vector<int32_t> position;  // by slot
    std::vector<int32_t> slots;
    std::vector<float> sums;
    std::vector<uint32_t> uses;
  };
  std::vector<Touched> touched_;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_HOT_ROWS_H_
