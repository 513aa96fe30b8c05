// Checkpoint restore into a live table: Table::RestoreRows,
// AdoptSpillFile and MergeAdmissionStates (contracts in embedding/table.h).
//
// Paths:
//  - rows that may exist, or few new rows: each stripe under its lock
//    replaces or allocates rows; rows beyond the stripe's memory share go
//    straight to the spill tier (settled with SettleSpill);
//  - many new rows into a spilling table: one SST file ingested by
//    RocksDB, then each stripe takes what fits (PlaceRowsOfSpillTier);
//  - a whole checkpoint table file: adopted by the spill tier as it is,
//    then the same placement.
// Rows reach the spill tier before any stripe counts them, so a concurrent
// Pull of such a key finds the restored row, never a fresh one. Restored
// rows count as unchanged for the next incremental snapshot.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_TABLE_RESTORE_H_
#define EMBEDPS_EMBEDDING_INTERNAL_TABLE_RESTORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "embedding/internal/table_core.h"
#include "embedding/table.h"

namespace embedps::embedding_internal {

absl::Status RestoreRows(TableCore& core, absl::Span<const uint64_t> keys,
                         absl::Span<const char> records,
                         embedding::Table::RestoredKeys assume);

absl::Status AdoptSpillFile(TableCore& core, const std::string& path,
                            absl::Span<const uint64_t> keys,
                            absl::Span<const char> records,
                            absl::Span<const uint64_t> rows_per_stripe);

absl::Status MergeAdmissionStates(TableCore& core,
                                  const std::vector<std::string>& states);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_TABLE_RESTORE_H_
