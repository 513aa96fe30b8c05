// ValuesTable: a Table of values only, for a serving replica's base.
//
// A row is its key and its spec().dim floats: no optimizer state, access
// count, touch time or admission; no spill tier; no Pull or Push. Rows are
// written by checkpoint restores and by a replica folding publications in
// (RestoreRows, Erase) and read by Lookup and Scan, concurrently.
//
// Memory: a settled row costs its floats, its 8-byte key and half a byte
// to a byte of directory. Each lock stripe keeps its settled rows sorted
// by the key's hash (rotated: the bits that pick the stripe last) in
// arrays of exactly their size (keys; floats), with the start of every
// bucket of 4-8 rows (by the rotated hash's top bits); a key is searched
// for in its bucket by bisection and a short scan, so no input can make a
// lookup cost more than O(log rows). A batched Lookup runs in stages a few
// keys apart (bucket, keys, row), each prefetching what the next reads.
// Rows of keys new to a stripe wait in a pending map, and
// erased settled keys in a removed set, until the two hold a quarter of
// the stripe's settled rows (or ReleaseUnusedMemory is called); then the
// stripe is rebuilt, merged, without its lock, and swapped in. A row of a
// key the stripe holds is overwritten in place.
//
// The operations a serving replica never needs are refused with
// FAILED_PRECONDITION (Pull, Push, ReadRecords, WriteRecords,
// TakeSnapshot, AdoptSpillFile). SweepExpired removes nothing (a replica's
// rows leave when training removes them); admission states are ignored;
// there is no change log (TakeChangedKeys is always empty).
//
// Thread safety: all methods are thread-safe. Readers take a stripe's lock
// shared. Writers (RestoreRows, Erase, ReleaseUnusedMemory) run one at a
// time; they hold a stripe's lock exclusively only while they overwrite
// rows or swap in a rebuilt stripe, so a Lookup waits for at most one
// stripe's share of a batch, never for a rebuild. A batch is atomic per
// stripe, not as a whole (as Table's).
#ifndef EMBEDPS_EMBEDDING_VALUES_TABLE_H_
#define EMBEDPS_EMBEDDING_VALUES_TABLE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "embedding/table.h"
#include "embedding/table_spec.h"

namespace embedps::embedding {

// INVALID_ARGUMENT (naming the field) if ValidateTableSpec rejects `spec`,
// or if its optimizer keeps state (a values table has none) or it has a
// memory budget (a values table does not spill).
absl::StatusOr<std::unique_ptr<Table>> CreateValuesTable(const TableSpec& spec);

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_VALUES_TABLE_H_
