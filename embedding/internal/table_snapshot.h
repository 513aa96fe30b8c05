// Table::TakeSnapshot: the copy a checkpoint is written from.
//
// The pause: every stripe is locked (in index order; the only place that
// holds more than one lock), resident rows are copied (all, or those with
// the dirty bit), the keys removed since the last snapshot and the
// admission states are taken, a RocksDB snapshot is taken for the spilled
// rows, the change sets are cleared, and the stripes are unlocked.
// Everything after (reading changed spilled rows, sorting) runs with no
// table lock held.
//
// State that may lag: a spilled row's dirty mark lives in
// SpillState::dirty_keys (its bit is not in memory); both are reset here.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_TABLE_SNAPSHOT_H_
#define EMBEDPS_EMBEDDING_INTERNAL_TABLE_SNAPSHOT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "embedding/internal/table_core.h"
#include "embedding/table.h"

namespace embedps::embedding_internal {

// A full snapshot, or an incremental one (the rows changed and the keys
// removed since the previous snapshot; a table's first snapshot is always
// full). Every snapshot starts a new change set. Errors only from the
// spill tier.
absl::StatusOr<std::unique_ptr<embedding::TableSnapshot>> TakeTableSnapshot(
    TableCore& core, bool incremental);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_TABLE_SNAPSHOT_H_
