// The spill tier's policy: how many rows a stripe keeps in memory under the
// table's budget, which rows leave (CLOCK, then TinyLFU-style competition
// with the rows that came in since the last round), and how they are
// written out. docs/architecture.md, "Spill tier", has the why.
//
// Thread safety: every function runs under the stripe's lock it names.
// Invariant kept: a victim's record reaches the spill tier (one atomic
// RocksDB write batch) before its row is freed, so a key is always in one
// tier or the other when the lock is free.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_SPILL_POLICY_H_
#define EMBEDPS_EMBEDDING_INTERNAL_SPILL_POLICY_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "embedding/internal/spill_store.h"
#include "embedding/internal/stripe.h"
#include "embedding/internal/table_core.h"
#include "embedding/table_spec.h"

namespace embedps::embedding_internal {

// What a spilling table's budget sets aside before its rows: its spill
// tier's memtables and block cache (which holds the index and filter
// blocks too), and the keys of changed and removed rows it tracks for
// incremental snapshots (dirty_keys, removed_keys).
struct SpillReserve {
  // Each of kMaxMemtables memtables: a 32nd of the budget, within
  // [kMinMemtableBytes, 16 MiB].
  uint64_t memtable_bytes;
  // An eighth of the budget, at most `block_cache_limit` (TableOptions),
  // at least 64 KiB.
  uint64_t block_cache_bytes;
  // A 16th of the budget (each tracked key costs kTrackedKeyBytes; a
  // snapshot reads the changed spilled rows back in chunks as it is
  // written, not all at once).
  uint64_t tracked_key_bytes;
  uint64_t total() const {
    return kMaxMemtables * memtable_bytes + block_cache_bytes +
           tracked_key_bytes;
  }
};
// RocksDB's smallest memtable.
inline constexpr uint64_t kMinMemtableBytes = 64 << 10;
// Keys a stripe tracks however small the budget (~21 KiB a stripe).
inline constexpr uint64_t kMinTrackedKeysPerStripe = 1024;
// A key in a flat_hash_set<uint64_t> at its lowest load factor (7/16).
inline constexpr uint64_t kTrackedKeyBytes = 21;

SpillReserve PlanSpillReserve(uint64_t budget_bytes,
                              uint64_t block_cache_limit);

// How a spilling table divides its memory budget.
struct SpillBudget {
  // Resident rows a stripe may hold.
  uint64_t max_resident_per_stripe;
  // Counters in each row of a stripe's frequency sketch.
  uint64_t sketch_width;
  // Sightings after which the sketch halves its counters.
  uint64_t sketch_sample;
  // Keys a stripe's dirty_keys and removed_keys may hold together.
  uint64_t max_tracked_keys_per_stripe;
};

// Each stripe gets an equal share of the budget less `reserve` (at most
// 5/16 of the budget: below a few MiB its floors are more), less its
// admission sketch (`admission_bytes`) and its frequency sketch; a
// resident row costs its floats (`row_floats`), ~12 bytes of index and ~9
// of spill-copy metadata.
SpillBudget PlanSpillBudget(const embedding::TableSpec& spec,
                            int32_t row_floats, uint64_t admission_bytes,
                            const SpillReserve& reserve);

// Spill-tier writes one stripe collects under its lock.
struct SpillWrites {
  std::vector<uint64_t> put_keys;
  std::vector<char> put_records;
  std::vector<uint64_t> delete_keys;
  // Rows whose spill-tier copy is current but for its access metadata.
  std::vector<uint64_t> metadata_keys;
  std::vector<uint64_t> access_metadata;  // AccessMetadata, by metadata_keys
  bool empty() const {
    return put_keys.empty() && delete_keys.empty() && metadata_keys.empty();
  }
  void clear();
};

// Picks rows to spill if the stripe holds more than its share of the
// budget, writes them and `writes` in one atomic batch, and only then frees
// them; `writes` is cleared. On error nothing is freed.
//
// A victim whose spill-tier copy is current (same floats) is not written
// again. A table with a TTL writes its access metadata if it moved (8
// bytes, a RocksDB Merge), so that the TTL sees every touch. A table
// without one writes nothing: there last touch and Pull count are
// statistics, and those of a row that was only read while resident stay
// as the spill tier has them (they lag the row's, never lead).
// REQUIRES: core.spill is not null.
absl::Status SettleSpill(TableCore& core, Stripe& stripe, SpillWrites& writes)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

// CLOCK: rows touched since the hand last passed lose their reference bit
// and stay; the first unreferenced rows are chosen, until the stripe is
// 1/16 below its share (so that eviction runs in batches). At most two
// revolutions, so every row is visited at most twice. Then the rows that
// entered memory since the last round compete with the chosen ones
// (KeepFrequentRows). Exposed for tests.
void SelectVictims(const TableCore& core, Stripe& stripe,
                   std::vector<RowId>& victims)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

// TinyLFU's admission, one round at a time: the rows that entered memory
// since the last round (promoted or created) and the CLOCK's victims
// compete, and the victims.size() of them seen least often (the stripe's
// frequency sketch; on a tie the newcomer) become the victims.
void KeepFrequentRows(Stripe& stripe, std::vector<RowId>& victims)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_SPILL_POLICY_H_
