// SpillStore: the on-disk tier of one table, a RocksDB instance holding the
// rows that left memory. Keys are the row keys (8 bytes, big-endian, so the
// store's order is numeric order); values are fixed-size row records.
//
// The store is a cache of the table, not its durable copy: Open wipes the
// directory, and writes skip the write-ahead log (after a crash the table is
// restored from its last checkpoint, never from the spill directory). See
// docs/architecture.md ("Spill tier") for every option and why.
//
// Thread safety: all methods are thread-safe (RocksDB's guarantees).
#ifndef EMBEDPS_EMBEDDING_INTERNAL_SPILL_STORE_H_
#define EMBEDPS_EMBEDDING_INTERNAL_SPILL_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace rocksdb {
class Cache;
class DB;
class Snapshot;
class TableFactory;
}  // namespace rocksdb

namespace embedps::embedding_internal {

// Memtables a spill tier holds at most (one filling, the rest flushing).
inline constexpr int kMaxMemtables = 4;

struct SpillStoreOptions {
  // Directory of the RocksDB instance; created, and emptied if it exists.
  std::string path;
  // Bytes of every record.
  size_t record_bytes = 0;
  // RocksDB block cache (uncompressed blocks of recently read rows, and
  // the index and filter blocks).
  uint64_t block_cache_bytes = uint64_t{64} << 20;
  // Each of the up to kMaxMemtables memtables. Default: 16 MiB.
  uint64_t memtable_bytes = uint64_t{16} << 20;
  // How the kernel reads the files on a miss. false: they are advised
  // random-access, and a miss reads the page it needs (4 KiB) — right where
  // the spill tier is larger than the page cache, the case it exists for.
  // true: a miss reads around its page (the device's read_ahead_kb), which
  // fills the page cache with the tier in large reads — right where the
  // files fit in it (e.g. after a restart, or on a host that reclaims idle
  // file pages), wasteful where they do not. Default: false.
  bool read_around = false;
};

struct SpillStoreStats {
  uint64_t multiget_calls = 0;
  uint64_t multiget_keys = 0;
  uint64_t multiget_found = 0;
  uint64_t multiget_micros = 0;
  uint64_t write_batches = 0;
  uint64_t rows_written = 0;
  uint64_t rows_deleted = 0;
  // Rows whose access metadata alone was written (Write's metadata_keys).
  uint64_t metadata_updates = 0;
};

class SpillStore {
 public:
  // A consistent read view (a RocksDB snapshot) for checkpoints.
  class ReadView {
   public:
    ~ReadView();
    ReadView(const ReadView&) = delete;
    ReadView& operator=(const ReadView&) = delete;

    // Calls `visit(key, record)` for every stored row in increasing key
    // order; stops at the first error `visit` returns.
    absl::Status ForEach(
        absl::FunctionRef<absl::Status(uint64_t, const char*)> visit) const;

    // As SpillStore::MultiGet, as of the view.
    absl::Status MultiGet(absl::Span<const uint64_t> keys, char* records,
                          absl::Span<bool> found) const;

   private:
    friend class SpillStore;
    ReadView(const SpillStore* store, const rocksdb::Snapshot* snapshot)
        : store_(store), snapshot_(snapshot) {}
    const SpillStore* store_;
    const rocksdb::Snapshot* snapshot_;
  };

  static absl::StatusOr<std::unique_ptr<SpillStore>> Open(
      const SpillStoreOptions& options);
  ~SpillStore();

  size_t record_bytes() const { return record_bytes_; }

  // One batched read of `keys` (distinct, any order): the record of key i,
  // when stored, goes to records + i·record_bytes and found[i] is set.
  // DATA_LOSS if a stored value has the wrong size; INTERNAL/IO errors from
  // RocksDB name the directory.
  absl::Status MultiGet(absl::Span<const uint64_t> keys, char* records,
                        absl::Span<bool> found);

  // One atomic batch: removes delete_keys (absent keys are fine), stores
  // put_keys[i] → put_records + i·record_bytes, and gives the stored record
  // of metadata_keys[i] new access metadata: access_metadata[i], as its 8
  // bytes in memory, replaces the record's first 8 (last touch and access
  // word), its floats stay. The record must be stored: reading a key
  // whose metadata was replaced without a record fails (a corruption).
  // Replacing metadata writes 8 bytes instead of a record (a RocksDB Merge,
  // folded into the record when it is read or compacted).
  absl::Status Write(absl::Span<const uint64_t> put_keys,
                     const char* put_records,
                     absl::Span<const uint64_t> delete_keys,
                     absl::Span<const uint64_t> metadata_keys = {},
                     absl::Span<const uint64_t> access_metadata = {});

  // Bulk load: stores keys[i] -> records + i·record_bytes by writing one
  // SST file and ingesting it (RocksDB's IngestExternalFile: no memtable,
  // and no compaction where the keys' range holds nothing yet). Replaces
  // stored rows of the same keys. For large sorted batches (checkpoint
  // restore); Write is cheaper for a few rows.
  // INVALID_ARGUMENT unless `keys` are strictly increasing.
  absl::Status Ingest(absl::Span<const uint64_t> keys, const char* records);

  // Bulk load of a whole sorted SST file of 8-byte keys and records (a
  // checkpoint table file): hard-links it into the store (copies it if the
  // link fails, e.g. across file systems) and ingests it; entries whose key
  // is longer than 8 bytes (the file's metadata) are deleted from the
  // store. `path` itself is left as it was, byte for byte.
  // Errors name the file.
  absl::Status Adopt(const std::string& path);

  std::unique_ptr<ReadView> NewReadView() const;

  SpillStoreStats Stats() const;
  // Bytes the instance occupies on disk (SST files), from RocksDB.
  uint64_t DiskBytes() const;
  // Bytes the store holds in memory: memtables, the block cache's contents,
  // and table readers' memory outside the cache.
  uint64_t MemoryBytes() const;

 private:
  SpillStore(std::string path, size_t record_bytes,
             std::unique_ptr<rocksdb::DB> db);
  // Ingests `file`, which the store owns from now on (moved in).
  absl::Status IngestOwnFile(const std::string& file);
  absl::Status MultiGetAt(const rocksdb::Snapshot* snapshot,
                          absl::Span<const uint64_t> keys, char* records,
                          absl::Span<bool> found) const;

  const std::string path_;
  const size_t record_bytes_;
  std::unique_ptr<rocksdb::DB> db_;
  mutable std::atomic<uint64_t> multiget_calls_{0}, multiget_keys_{0},
      multiget_found_{0}, multiget_micros_{0};
  std::atomic<uint64_t> write_batches_{0}, rows_written_{0}, rows_deleted_{0},
      metadata_updates_{0};
  // Names ingested files uniquely.
  std::atomic<uint64_t> next_ingest_file_{0};
};

// The table format of the spill tier's files and of checkpoint files:
// block-based with a 10-bit bloom filter per key, no compression, an index
// with a restart point every 16 blocks; blocks of `block_size` bytes.
// Checkpoint files use it so that a restored file joins a spill tier as it
// is (with its own block size). `block_cache` may be null (writers); with
// one (a spill tier), index and filter blocks are partitioned and held in
// it, so that the cache bounds the memory they take.
std::shared_ptr<rocksdb::TableFactory> NewSpillTableFactory(
    std::shared_ptr<rocksdb::Cache> block_cache, size_t block_size);
// A spill tier's own files: a miss reads one record (~0.5 KiB) from a block
// that is rarely in any cache, fetching (and checksumming) the whole block:
// 2 KiB blocks make a cold key's MultiGet ~13% faster than 4 KiB ones.
inline constexpr size_t kSpillTierBlockSize = 2048;
// Checkpoint files: written and read whole, where every block costs (build,
// checksum, index entry): 1 KiB blocks wrote ~30% slower than 4 KiB ones.
inline constexpr size_t kCheckpointBlockSize = 4096;

// The 8-byte big-endian form of a key (or of any uint64: checkpoint
// files use it for their other integers too), and back.
void EncodeKey(uint64_t key, char out[8]);
uint64_t DecodeKey(const char in[8]);

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_SPILL_STORE_H_
