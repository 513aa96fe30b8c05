#include "embedding/internal/spill_store.h"

#include <cstring>
#include <deque>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/merge_operator.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace embedps::embedding_internal {
namespace {

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what,
                       absl::string_view path) {
  if (status.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("spill store ", what, " in '", path,
                                          "': ", status.ToString()));
}

// The first 8 bytes of a record (last touch and access word) replaced by
// an operand, the rest kept: Write's metadata_keys. Only the newest operand
// matters, so partial merges keep it. A key with operands but no record is
// refused (a corruption: the table writes metadata only over a record it
// read).
class AccessMetadataMerge final : public rocksdb::MergeOperator {
 public:
  static constexpr size_t kMetadataBytes = 8;

  const char* Name() const override { return "embedps.AccessMetadataMerge"; }

  bool FullMergeV2(const MergeOperationInput& in,
                   MergeOperationOutput* out) const override {
    if (in.existing_value == nullptr ||
        in.existing_value->size() < kMetadataBytes || in.operand_list.empty() ||
        in.operand_list.back().size() != kMetadataBytes) {
      return false;
    }
    out->new_value.assign(in.operand_list.back().data(), kMetadataBytes);
    out->new_value.append(in.existing_value->data() + kMetadataBytes,
                          in.existing_value->size() - kMetadataBytes);
    return true;
  }

  bool PartialMergeMulti(const rocksdb::Slice& /*key*/,
                         const std::deque<rocksdb::Slice>& operands,
                         std::string* new_value,
                         rocksdb::Logger* /*logger*/) const override {
    if (operands.empty() || operands.back().size() != kMetadataBytes) {
      return false;
    }
    new_value->assign(operands.back().data(), kMetadataBytes);
    return true;
  }
};

// See docs/architecture.md ("Spill tier") for why each option.
rocksdb::Options SpillOptions(const SpillStoreOptions& options) {
  rocksdb::Options rocks;
  rocks.create_if_missing = true;
  rocks.error_if_exists = true;
  rocks.IncreaseParallelism(2);
  // Reads of page-cached files without a copy into a buffer per block.
  rocks.allow_mmap_reads = true;
  rocks.advise_random_on_open = !options.read_around;
  rocks.max_background_jobs = 2;
  rocks.merge_operator = std::make_shared<AccessMetadataMerge>();
  // Rows are float vectors: general-purpose compression gains little and
  // would cost CPU on every promoted row.
  rocks.compression = rocksdb::kNoCompression;
  rocks.bottommost_compression = rocksdb::kNoCompression;
  // Small memtables: inserts walk a shallower skip list.
  rocks.write_buffer_size = options.memtable_bytes;
  // Most keys a promotion looks up are not in the memtables (they spilled
  // long ago): a bloom filter over each memtable's whole keys answers those
  // without walking the skip list.
  rocks.memtable_prefix_bloom_size_ratio = 0.05;
  rocks.memtable_whole_key_filtering = true;
  rocks.max_write_buffer_number = kMaxMemtables;
  rocks.level0_file_num_compaction_trigger = 8;
  rocks.target_file_size_base = 64 << 20;
  rocks.max_bytes_for_level_base = 256 << 20;
  rocks.table_factory = NewSpillTableFactory(
      rocksdb::NewLRUCache(options.block_cache_bytes), kSpillTierBlockSize);
  return rocks;
}

}  // namespace

std::shared_ptr<rocksdb::TableFactory> NewSpillTableFactory(
    std::shared_ptr<rocksdb::Cache> block_cache, size_t block_size) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = std::move(block_cache);
  // Promotions look up keys that are often not spilled (new keys): a bloom
  // filter answers most of those misses without reading a block.
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  table.block_size = block_size;
  // A restart point every 16 index entries (keys and block handles
  // delta-encoded between them) instead of every entry: the index takes a
  // fraction of the memory; lookups measured as fast.
  table.index_block_restart_interval = 16;
  if (table.block_cache != nullptr) {
    // A spill tier's memory is its memtables and this cache, whatever its
    // size: index and filter blocks live in the cache too (partitioned, so
    // that a lookup loads the 4 KiB partitions it needs, not a file's
    // whole index and filter), with only the top levels pinned.
    table.cache_index_and_filter_blocks = true;
    table.cache_index_and_filter_blocks_with_high_priority = true;
    table.pin_top_level_index_and_filter = true;
    table.index_type = rocksdb::BlockBasedTableOptions::kTwoLevelIndexSearch;
    table.partition_filters = true;
    table.metadata_block_size = 4096;
  }
  return std::shared_ptr<rocksdb::TableFactory>(
      rocksdb::NewBlockBasedTableFactory(table));
}

void EncodeKey(uint64_t key, char out[8]) {
  for (int i = 7; i >= 0; --i) {
    out[i] = static_cast<char>(key & 0xff);
    key >>= 8;
  }
}

uint64_t DecodeKey(const char in[8]) {
  uint64_t key = 0;
  for (int i = 0; i < 8; ++i) key = (key << 8) | static_cast<uint8_t>(in[i]);
  return key;
}

absl::StatusOr<std::unique_ptr<SpillStore>> SpillStore::Open(
    const SpillStoreOptions& options) {
  if (options.path.empty() || options.record_bytes == 0) {
    return absl::InvalidArgumentError(
        "a spill store needs a directory and a record size");
  }
  std::error_code error;
  std::filesystem::remove_all(options.path, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot empty the spill directory '", options.path,
                     "': ", error.message()));
  }
  std::filesystem::create_directories(options.path, error);
  if (error) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot create the spill directory '", options.path,
                     "': ", error.message()));
  }
  rocksdb::DB* db = nullptr;
  const rocksdb::Status status =
      rocksdb::DB::Open(SpillOptions(options), options.path, &db);
  if (!status.ok()) return FromRocks(status, "open", options.path);
  return std::unique_ptr<SpillStore>(new SpillStore(
      options.path, options.record_bytes, std::unique_ptr<rocksdb::DB>(db)));
}

SpillStore::SpillStore(std::string path, size_t record_bytes,
                       std::unique_ptr<rocksdb::DB> db)
    : path_(std::move(path)), record_bytes_(record_bytes), db_(std::move(db)) {}

SpillStore::~SpillStore() {
  if (db_ != nullptr) db_->Close().PermitUncheckedError();
}

absl::Status SpillStore::MultiGet(absl::Span<const uint64_t> keys,
                                  char* records, absl::Span<bool> found) {
  return MultiGetAt(nullptr, keys, records, found);
}

absl::Status SpillStore::MultiGetAt(const rocksdb::Snapshot* snapshot,
                                    absl::Span<const uint64_t> keys,
                                    char* records,
                                    absl::Span<bool> found) const {
  const size_t n = keys.size();
  if (n == 0) return absl::OkStatus();
  const absl::Time start = absl::Now();
  std::vector<char> encoded(n * 8);
  std::vector<rocksdb::Slice> slices(n);
  bool increasing = true;
  for (size_t i = 0; i < n; ++i) {
    EncodeKey(keys[i], &encoded[i * 8]);
    slices[i] = rocksdb::Slice(&encoded[i * 8], 8);
    if (i > 0 && keys[i - 1] >= keys[i]) increasing = false;
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  rocksdb::ReadOptions read;
  read.snapshot = snapshot;
  // Callers mostly pass sorted keys (misses of a batch): RocksDB then skips
  // its own sort (big-endian keys sort bytewise as numbers).
  db_->MultiGet(read, db_->DefaultColumnFamily(), n, slices.data(),
                values.data(), statuses.data(), /*sorted_input=*/increasing);
  uint64_t hits = 0;
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) {
      found[i] = false;
      continue;
    }
    if (!statuses[i].ok()) return FromRocks(statuses[i], "MultiGet", path_);
    if (values[i].size() != record_bytes_) {
      return absl::DataLossError(absl::StrCat(
          "spill store in '", path_, "': row of key ", keys[i], " has ",
          values[i].size(), " bytes, expected ", record_bytes_));
    }
    std::memcpy(records + i * record_bytes_, values[i].data(), record_bytes_);
    found[i] = true;
    ++hits;
  }
  multiget_calls_.fetch_add(1, std::memory_order_relaxed);
  multiget_keys_.fetch_add(n, std::memory_order_relaxed);
  multiget_found_.fetch_add(hits, std::memory_order_relaxed);
  multiget_micros_.fetch_add(absl::ToInt64Microseconds(absl::Now() - start),
                             std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status SpillStore::Write(absl::Span<const uint64_t> put_keys,
                               const char* put_records,
                               absl::Span<const uint64_t> delete_keys,
                               absl::Span<const uint64_t> metadata_keys,
                               absl::Span<const uint64_t> access_metadata) {
  if (put_keys.empty() && delete_keys.empty() && metadata_keys.empty()) {
    return absl::OkStatus();
  }
  if (access_metadata.size() != metadata_keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spill store write in '", path_, "': ", metadata_keys.size(),
        " metadata keys with ", access_metadata.size(), " metadata values"));
  }
  constexpr size_t kMetadataBytes = AccessMetadataMerge::kMetadataBytes;
  static_assert(sizeof(uint64_t) == kMetadataBytes);
  rocksdb::WriteBatch batch(put_keys.size() * (record_bytes_ + 24) +
                            delete_keys.size() * 24 +
                            metadata_keys.size() * (kMetadataBytes + 24));
  char key[8];
  // Deletes first: a key both deleted and put in one batch ends up stored.
  for (uint64_t k : delete_keys) {
    EncodeKey(k, key);
    absl::Status status =
        FromRocks(batch.Delete(rocksdb::Slice(key, 8)), "batch delete", path_);
    if (!status.ok()) return status;
  }
  for (size_t i = 0; i < put_keys.size(); ++i) {
    EncodeKey(put_keys[i], key);
    absl::Status status = FromRocks(
        batch.Put(
            rocksdb::Slice(key, 8),
            rocksdb::Slice(put_records + i * record_bytes_, record_bytes_)),
        "batch put", path_);
    if (!status.ok()) return status;
  }
  for (size_t i = 0; i < metadata_keys.size(); ++i) {
    EncodeKey(metadata_keys[i], key);
    absl::Status status = FromRocks(
        batch.Merge(
            rocksdb::Slice(key, 8),
            rocksdb::Slice(reinterpret_cast<const char*>(&access_metadata[i]),
                           kMetadataBytes)),
        "batch metadata merge", path_);
    if (!status.ok()) return status;
  }
  rocksdb::WriteOptions write;
  // The spill tier is rebuilt from a checkpoint after a crash, never
  // replayed: a WAL would double the bytes written for nothing.
  write.disableWAL = true;
  absl::Status status = FromRocks(db_->Write(write, &batch), "write", path_);
  if (!status.ok()) return status;
  write_batches_.fetch_add(1, std::memory_order_relaxed);
  rows_written_.fetch_add(put_keys.size(), std::memory_order_relaxed);
  rows_deleted_.fetch_add(delete_keys.size(), std::memory_order_relaxed);
  metadata_updates_.fetch_add(metadata_keys.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status SpillStore::Ingest(absl::Span<const uint64_t> keys,
                                const char* records) {
  if (keys.empty()) return absl::OkStatus();
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i - 1] >= keys[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("spill store Ingest in '", path_,
                       "': keys must be strictly "
                       "increasing; key ",
                       keys[i], " follows ", keys[i - 1]));
    }
  }
  const std::string file =
      absl::StrCat(path_, "/ingest-", next_ingest_file_.fetch_add(1), ".sst");
  // The store's own options: the file joins the store as if flushed.
  const rocksdb::Options options = db_->GetOptions();
  // Kept in the page cache, as a flushed file would be: its rows are read
  // back soon (promotions, checkpoints).
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(options), options,
                                db_->DefaultColumnFamily(),
                                /*invalidate_page_cache=*/false);
  absl::Status status = FromRocks(writer.Open(file), "ingest open", path_);
  char key[8];
  for (size_t i = 0; status.ok() && i < keys.size(); ++i) {
    EncodeKey(keys[i], key);
    status = FromRocks(
        writer.Put(rocksdb::Slice(key, 8),
                   rocksdb::Slice(records + i * record_bytes_, record_bytes_)),
        "ingest put", path_);
  }
  if (status.ok()) status = FromRocks(writer.Finish(), "ingest finish", path_);
  if (status.ok()) status = IngestOwnFile(file);
  if (!status.ok()) {
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    return status;
  }
  write_batches_.fetch_add(1, std::memory_order_relaxed);
  rows_written_.fetch_add(keys.size(), std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status SpillStore::IngestOwnFile(const std::string& file) {
  rocksdb::IngestExternalFileOptions ingest;
  // The file is ours: RocksDB links it in instead of copying it.
  ingest.move_files = true;
  // Never write into the file (a sequence number in place): it may share
  // its bytes with a checkpoint's file (Adopt).
  ingest.write_global_seqno = false;
  return FromRocks(db_->IngestExternalFile({file}, ingest), "ingest", path_);
}

absl::Status SpillStore::Adopt(const std::string& path) {
  const std::string file =
      absl::StrCat(path_, "/adopt-", next_ingest_file_.fetch_add(1), ".sst");
  std::error_code error;
  std::filesystem::create_hard_link(path, file, error);
  if (error) {
    error.clear();
    std::filesystem::copy_file(path, file, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat("spill store in '", path_,
                                                 "': cannot link or copy '",
                                                 path, "': ", error.message()));
    }
  }
  const absl::Status status = IngestOwnFile(file);
  if (!status.ok()) {
    std::filesystem::remove(file, error);
    return absl::Status(status.code(), absl::StrCat("adopting '", path,
                                                    "': ", status.message()));
  }
  // Row keys are 8 bytes; everything longer (after eight 0xFF bytes, in a
  // checkpoint file) is metadata. The range starts above the largest row
  // key, which is eight 0xFF bytes exactly.
  const std::string all_ones(8, '\xff');
  rocksdb::WriteOptions write;
  write.disableWAL = true;
  return FromRocks(db_->DeleteRange(write, db_->DefaultColumnFamily(),
                                    all_ones + std::string(1, '\0'),
                                    all_ones + std::string(1, '\xff')),
                   "delete of an adopted file's metadata", path_);
}

std::unique_ptr<SpillStore::ReadView> SpillStore::NewReadView() const {
  return std::unique_ptr<ReadView>(new ReadView(this, db_->GetSnapshot()));
}

SpillStore::ReadView::~ReadView() { store_->db_->ReleaseSnapshot(snapshot_); }

absl::Status SpillStore::ReadView::ForEach(
    absl::FunctionRef<absl::Status(uint64_t, const char*)> visit) const {
  rocksdb::ReadOptions read;
  read.snapshot = snapshot_;
  // A checkpoint reads every spilled row once: keep them out of the cache.
  read.fill_cache = false;
  read.readahead_size = 2 << 20;
  std::unique_ptr<rocksdb::Iterator> it(store_->db_->NewIterator(read));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    if (key.size() != 8 || value.size() != store_->record_bytes_) {
      return absl::DataLossError(absl::StrCat(
          "spill store in '", store_->path_, "': an entry of ", key.size(), "+",
          value.size(), " bytes, expected 8+", store_->record_bytes_));
    }
    absl::Status status = visit(DecodeKey(key.data()), value.data());
    if (!status.ok()) return status;
  }
  return FromRocks(it->status(), "scan", store_->path_);
}

absl::Status SpillStore::ReadView::MultiGet(absl::Span<const uint64_t> keys,
                                            char* records,
                                            absl::Span<bool> found) const {
  return store_->MultiGetAt(snapshot_, keys, records, found);
}

SpillStoreStats SpillStore::Stats() const {
  SpillStoreStats stats;
  stats.multiget_calls = multiget_calls_.load(std::memory_order_relaxed);
  stats.multiget_keys = multiget_keys_.load(std::memory_order_relaxed);
  stats.multiget_found = multiget_found_.load(std::memory_order_relaxed);
  stats.multiget_micros = multiget_micros_.load(std::memory_order_relaxed);
  stats.write_batches = write_batches_.load(std::memory_order_relaxed);
  stats.rows_written = rows_written_.load(std::memory_order_relaxed);
  stats.rows_deleted = rows_deleted_.load(std::memory_order_relaxed);
  stats.metadata_updates = metadata_updates_.load(std::memory_order_relaxed);
  return stats;
}

uint64_t SpillStore::MemoryBytes() const {
  uint64_t memtables = 0, readers = 0, cache = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kCurSizeAllMemTables,
                      &memtables);
  db_->GetIntProperty(rocksdb::DB::Properties::kEstimateTableReadersMem,
                      &readers);
  db_->GetIntProperty(rocksdb::DB::Properties::kBlockCacheUsage, &cache);
  return memtables + readers + cache;
}

uint64_t SpillStore::DiskBytes() const {
  uint64_t bytes = 0;
  db_->GetIntProperty(rocksdb::DB::Properties::kTotalSstFilesSize, &bytes);
  return bytes;
}

}  // namespace embedps::embedding_internal
