// The checkpoint of one table on one shard: a RocksDB SST file written
// from a table's snapshot and restored into a table (its keys and their
// meaning: format.h).
#ifndef EMBEDPS_CHECKPOINT_TABLE_FILE_H_
#define EMBEDPS_CHECKPOINT_TABLE_FILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "checkpoint/format.h"
#include "common/file_io.h"
#include "embedding/table.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace embedps::checkpoint {

struct TableFileSummary {
  uint64_t rows = 0;
  uint64_t removed = 0;
  uint64_t bytes = 0;
  // XXH3-64 (xxHash) of the whole file, computed as RocksDB writes the
  // file (for the manifest).
  uint64_t xxh3 = 0;
};

struct TableFileWriteOptions {
  // The file system the file is written to; null: the operating system's.
  // (Tests give one that refuses direct IO, as some file systems do.)
  std::shared_ptr<rocksdb::FileSystem> file_system;
};

// Writes `snapshot` to `path` (via `path + ".tmp"`, synced, then renamed),
// with direct IO where the file system takes it and buffered writes where
// it does not (the rows are the same).
// UNAVAILABLE/INTERNAL naming the file on I/O errors.
absl::StatusOr<TableFileSummary> WriteTableFile(
    const embedding::TableSnapshot& snapshot, const std::string& path,
    const TableFileWriteOptions& options = {});

struct TableFileRestore {
  uint64_t rows = 0;
  uint64_t removed = 0;
  // Rows and removals of keys `keep` refused (another shard's).
  uint64_t skipped = 0;
  bool incremental = false;
  std::vector<std::string> admission_states;
};

// Applies a table file to `table`: rows of keys `keep` accepts (every key
// when `keep` is empty) are restored (RestoreRows, in batches), removed keys
// are erased. The whole file is first checked against `expected_xxh3` and
// RocksDB's block checksums. A full file kept whole and restored into a
// spilling table joins its spill tier as it is (Table::AdoptSpillFile: a
// hard link, no rewrite); memory takes what fits.
// REQUIRES for a full (not incremental) file: `table` holds none of its
// keys (restore starts from empty tables; files of different old shards
// hold disjoint keys).
// `values_only` (a serving replica's restore; null: none): `table` keeps
// no optimizer state (its optimizer has none, e.g. SGD) and each record is
// cut after its embedding, which `values_only->encode` may turn into the
// table's row; such a file is never adopted whole.
// DATA_LOSS naming the file if it is truncated or corrupt;
// FAILED_PRECONDITION naming it if its record size is not the table's (nor,
// with `values_only`, one of values_only->dim floats and some state).
struct ValuesOnly {
  // Floats of the file's embeddings.
  int32_t dim = 0;
  // Writes the table's row (table.spec().dim floats) for a file's
  // embedding (`dim` floats). Null: copied (the table's dim is `dim`).
  std::function<void(const float* embedding, float* row)> encode;
};
absl::StatusOr<TableFileRestore> RestoreTableFile(
    const std::string& path, uint64_t expected_xxh3, embedding::Table& table,
    const std::function<bool(uint64_t)>& keep = nullptr,
    const ValuesOnly* values_only = nullptr);

// As above, against `expected` (format.h FileChecksum).
absl::StatusOr<TableFileRestore> RestoreTableFile(
    const std::string& path, const FileChecksum& expected,
    embedding::Table& table,
    const std::function<bool(uint64_t)>& keep = nullptr,
    const ValuesOnly* values_only = nullptr);

// Where ReadTableFileValues puts a file's rows: a reader that keeps the
// embeddings only and is not a Table (a serving replica's overlay of an
// incremental checkpoint). Called in the file's key order, batch by batch,
// from the reading thread, as the file is read: what it was given counts
// only if ReadTableFileValues then succeeds (the whole file's checksum is
// checked last), and is to be dropped otherwise.
class ValuesSink {
 public:
  virtual ~ValuesSink() = default;
  // Rows: keys and their embeddings (keys × dim floats).
  virtual absl::Status Rows(absl::Span<const uint64_t> keys,
                            absl::Span<const float> embeddings) = 0;
  // Keys the file removes.
  virtual absl::Status Removed(absl::Span<const uint64_t> keys) = 0;
};

// As RestoreTableFile with values only (`dim` floats an embedding), into
// `sink` instead of a table; the rows of keys `keep` refuses are skipped.
// The file is read once, at the pace `sink` takes its rows, and its
// checksum computed afterwards (from the page cache). Errors as
// RestoreTableFile's (after rows may have reached `sink`), and whatever
// `sink` returns.
absl::StatusOr<TableFileRestore> ReadTableFileValues(
    const std::string& path, const FileChecksum& expected, int32_t dim,
    ValuesSink& sink, const std::function<bool(uint64_t)>& keep = nullptr);

// XXH3-64 of a whole file, as TableFileSummary::xxh3, read through or
// around the page cache (common/file_io.h). NOT_FOUND / UNAVAILABLE naming
// the file if it cannot be read.
absl::StatusOr<uint64_t> TableFileXxh3(const std::string& path,
                                       PageCache page_cache = PageCache::kUse);

}  // namespace embedps::checkpoint

#endif  // EMBEDPS_CHECKPOINT_TABLE_FILE_H_
