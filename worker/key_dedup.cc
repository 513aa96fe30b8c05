#include "worker/key_dedup.h"

#include <algorithm>

#include "common/for_each_part.h"

namespace embedps::worker {
namespace {

// The partition of a key among `parts`: the high bits of a multiplicative
// hash (ids are often small or strided; their low bits are not spread).
int PartitionOf(uint64_t key, int parts) {
  const uint64_t mixed = key * 0x9E3779B97F4A7C15ull;
  return static_cast<int>(((mixed >> 32) * static_cast<uint64_t>(parts)) >> 32);
}

}  // namespace

KeyDeduplicator::KeyDeduplicator(std::vector<int> slot_table, int num_tables,
                                 int threads)
    : slot_table_(std::move(slot_table)),
      num_tables_(num_tables),
      threads_(std::max(threads, 1)),
      maps_(threads_,
            std::vector<absl::flat_hash_map<uint64_t, int32_t>>(num_tables)),
      local_unique_(threads_, std::vector<std::vector<uint64_t>>(num_tables)) {}

void KeyDeduplicator::Run(
    absl::Span<const absl::Span<const uint64_t>> slot_keys,
    std::vector<std::vector<uint64_t>>& unique,
    std::vector<std::vector<int32_t>>& index) {
  const size_t slots = slot_keys.size();
  size_t keys = 0;
  for (const absl::Span<const uint64_t>& k : slot_keys) keys += k.size();
  const int parts = static_cast<int>(std::max<size_t>(
      1, std::min<size_t>(threads_, keys / kMinKeysPerThread)));
  // Cleared, not replaced: each table's list keeps its capacity from step
  // to step (swapped with the partition's list below when there is one).
  unique.resize(num_tables_);
  for (std::vector<uint64_t>& u : unique) u.clear();
  index.resize(slots);
  for (size_t s = 0; s < slots; ++s) index[s].resize(slot_keys[s].size());
  // Phase 1: each partition's keys, deduplicated in its own maps; index
  // holds positions within the partition.
  ForEachPart(parts, [&](int p) {
    for (int t = 0; t < num_tables_; ++t) {
      // A large map's clear() frees its array: it is sized again for as
      // many keys as the last step's, rather than grown from empty
      // through a rehash at every doubling.
      absl::flat_hash_map<uint64_t, int32_t>& map = maps_[p][t];
      const size_t last = map.size();
      map.clear();
      map.reserve(last);
      local_unique_[p][t].clear();
    }
    for (size_t s = 0; s < slots; ++s) {
      const int t = slot_table_[s];
      auto& map = maps_[p][t];
      std::vector<uint64_t>& local = local_unique_[p][t];
      const absl::Span<const uint64_t> k = slot_keys[s];
      int32_t* out = index[s].data();
      for (size_t i = 0; i < k.size(); ++i) {
        if (parts > 1 && PartitionOf(k[i], parts) != p) continue;
        const auto [it, inserted] =
            map.try_emplace(k[i], static_cast<int32_t>(local.size()));
        if (inserted) local.push_back(k[i]);
        out[i] = it->second;
      }
    }
  });
  if (parts == 1) {
    for (int t = 0; t < num_tables_; ++t) unique[t].swap(local_unique_[0][t]);
    return;
  }
  // Phase 2: the partitions' places in each table's list; each partition
  // copies its keys there and shifts its keys' positions.
  std::vector<std::vector<int32_t>> base(parts,
                                         std::vector<int32_t>(num_tables_));
  for (int t = 0; t < num_tables_; ++t) {
    size_t size = 0;
    for (int p = 0; p < parts; ++p) {
      base[p][t] = static_cast<int32_t>(size);
      size += local_unique_[p][t].size();
    }
    unique[t].resize(size);
  }
  ForEachPart(parts, [&](int p) {
    for (int t = 0; t < num_tables_; ++t) {
      std::copy(local_unique_[p][t].begin(), local_unique_[p][t].end(),
                unique[t].begin() + base[p][t]);
    }
    for (size_t s = 0; s < slots; ++s) {
      const int32_t shift = base[p][slot_table_[s]];
      if (shift == 0) continue;
      const absl::Span<const uint64_t> k = slot_keys[s];
      int32_t* out = index[s].data();
      for (size_t i = 0; i < k.size(); ++i) {
        if (PartitionOf(k[i], parts) == p) out[i] += shift;
      }
    }
  });
}

}  // namespace embedps::worker
