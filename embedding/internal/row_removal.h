// Removing rows from both tiers: Table::Erase and Table::SweepExpired
// (contracts in embedding/table.h).
//
// A removed resident row's spill-tier copy (current or stale) is deleted in
// the same write as any eviction, so it can never bring the row back. A
// removal is remembered for the next incremental snapshot
// (TableCore::NoteRemoved). The sweep holds a stripe's lock for at most
// kRowsPerLockHold rows at a time; over the spill tier it scans without
// locks, then re-checks and deletes each stripe's candidates under its
// lock, batched.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_ROW_REMOVAL_H_
#define EMBEDPS_EMBEDDING_INTERNAL_ROW_REMOVAL_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "embedding/internal/table_core.h"

namespace embedps::embedding_internal {

// Rows the sweep and the scan handle per lock hold.
constexpr RowId kRowsPerLockHold = 4096;

// Removes the rows of `keys`; returns how many there were.
absl::StatusOr<uint64_t> EraseRows(TableCore& core,
                                   absl::Span<const uint64_t> keys);

// Removes rows untouched for longer than the TTL; returns how many.
absl::StatusOr<uint64_t> SweepExpiredRows(TableCore& core);

// While the table holds more than its max_rows, removes the least
// recently touched rows (by last touch in the TTL's unit, steps or
// seconds, to within 1/8 of their age; spilled rows first within that):
// one pass counts, one removes. Rows created meanwhile may leave the table
// a little over the cap until the next call. Returns rows removed.
absl::StatusOr<uint64_t> EvictBeyondCap(TableCore& core);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_ROW_REMOVAL_H_
