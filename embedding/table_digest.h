// A digest of a table's contents: every row's key, embedding and optimizer
// state (not its access metadata), combined independently of order, so that
// two tables (or the shards of one table, summed) can be compared exactly.
#ifndef EMBEDPS_EMBEDDING_TABLE_DIGEST_H_
#define EMBEDPS_EMBEDDING_TABLE_DIGEST_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "embedding/table.h"

namespace embedps::embedding {

struct TableDigest {
  uint64_t rows = 0;
  // Sum (mod 2^64) over rows of a hash of (key, the bits of every float).
  uint64_t digest = 0;
};

// Reads the table with Scan: exact when no writer runs meanwhile.
absl::StatusOr<TableDigest> DigestTable(const Table& table);

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_TABLE_DIGEST_H_
