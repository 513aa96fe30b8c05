// KeyDeduplicator: a batch's keys grouped by table and deduplicated — each
// table's distinct keys (what a worker pulls once) and, per key of every
// slot, its position among them (UniqueRowsBatch::Slot::index).
//
// Large batches are split over threads by a hash of the key: thread p
// deduplicates the keys of its partition into its own map, and the tables'
// unique keys are the partitions' in partition order. A batch below
// kMinKeysPerThread keys per thread runs on the calling thread, in
// first-seen order. Either way every key appears once per table and every
// index names its key.
//
// Thread safety: one Run at a time per deduplicator.
#ifndef EMBEDPS_WORKER_KEY_DEDUP_H_
#define EMBEDPS_WORKER_KEY_DEDUP_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace embedps::worker {

class KeyDeduplicator {
 public:
  static constexpr size_t kMinKeysPerThread = 32768;

  // slot_table[s]: the table of slot s, in [0, num_tables). threads ≥ 1.
  KeyDeduplicator(std::vector<int> slot_table, int num_tables, int threads);

  // slot_keys: one span per slot. Replaces unique (num_tables lists) and
  // index (one list per slot, its keys' positions in their table's list).
  void Run(absl::Span<const absl::Span<const uint64_t>> slot_keys,
           std::vector<std::vector<uint64_t>>& unique,
           std::vector<std::vector<int32_t>>& index);

 private:
  const std::vector<int> slot_table_;
  const int num_tables_;
  const int threads_;
  // Per partition, per table.
  std::vector<std::vector<absl::flat_hash_map<uint64_t, int32_t>>> maps_;
  std::vector<std::vector<std::vector<uint64_t>>> local_unique_;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_KEY_DEDUP_H_
