#include "checkpoint/table_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/format.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "embedding/internal/spill_store.h"
#include "embedding/internal/write_behind_file_system.h"
#include "rocksdb/env.h"
#include "rocksdb/file_checksum.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "xxhash.h"

namespace embedps::checkpoint {

using embedding::RowRecordBytes;
using embedding::Table;
using embedding::TableSnapshot;

namespace {

using embedding_internal::DecodeKey;
using embedding_internal::EncodeKey;

// Bytes of rows read from a snapshot while the previous batch is written.
constexpr size_t kWriteBatchBytes = size_t{8} << 20;
// SstFileWriter's output buffer (one write to the file), and how much of it
// may wait for the disk while the writer goes on.
constexpr size_t kWriteBufferBytes = size_t{4} << 20;
constexpr size_t kWriteBehindBytes = size_t{16} << 20;
// Record bytes handed to Table::RestoreRows at a time: a spilling table
// ingests each batch as one SST file, so batches are large.
constexpr size_t kRestoreBatchBytes = size_t{64} << 20;
// Rows a batch into a table in memory: the table's per-batch scratch
// (~24 bytes a row, kept by the restoring thread) stays small, and a
// larger batch is no faster.
constexpr size_t kRestoreBatchRowsInMemory = 65536;

absl::Status FromRocks(const rocksdb::Status& status, absl::string_view what,
                       const std::string& path) {
  if (status.ok()) return absl::OkStatus();
  const std::string message = absl::StrCat(
      "checkpoint file '", path, "': ", what, ": ", status.ToString());
  if (status.IsCorruption() || status.IsIncomplete()) {
    return absl::DataLossError(message);
  }
  if (status.IsNotFound() || status.IsPathNotFound()) {
    return absl::NotFoundError(message);
  }
  return absl::UnavailableError(message);
}

// XXH3-64 of everything RocksDB writes to a file (xxHash's streaming API):
// a whole-file checksum at memory speed. RocksDB's own CRC-32C generator
// runs at ~1.2 GB/s here and took a third of the writer's time.
class Xxh3Generator : public rocksdb::FileChecksumGenerator {
 public:
  Xxh3Generator() : state_(XXH3_createState()) { XXH3_64bits_reset(state_); }
  ~Xxh3Generator() override { XXH3_freeState(state_); }
  void Update(const char* data, size_t n) override {
    XXH3_64bits_update(state_, data, n);
  }
  void Finalize() override { value_ = XXH3_64bits_digest(state_); }
  // 8 bytes, big-endian.
  std::string GetChecksum() const override {
    std::string bytes(8, '\0');
    EncodeKey(value_, bytes.data());
    return bytes;
  }
  const char* Name() const override { return "embedps.XXH3_64"; }

 private:
  XXH3_state_t* state_;
  uint64_t value_ = 0;
};

class Xxh3GeneratorFactory : public rocksdb::FileChecksumGenFactory {
 public:
  std::unique_ptr<rocksdb::FileChecksumGenerator> CreateFileChecksumGenerator(
      const rocksdb::FileChecksumGenContext&) override {
    return std::make_unique<Xxh3Generator>();
  }
  const char* Name() const override { return "embedps.XXH3_64Factory"; }
};

rocksdb::Options FileOptions() {
  rocksdb::Options options;
  // Rows are floats: compression buys little and costs the write rate.
  options.compression = rocksdb::kNoCompression;
  // The spill tier's table format: a restored file can join a spill tier
  // as it is and serve point lookups (with larger blocks than the tier's
  // own files: a checkpoint is written and read whole).
  options.table_factory = embedding_internal::NewSpillTableFactory(
      nullptr, embedding_internal::kCheckpointBlockSize);
  // The whole-file checksum is computed as the file is written: no second
  // pass over it.
  options.file_checksum_gen_factory = std::make_shared<Xxh3GeneratorFactory>();
  // Written back to disk as it is written (sync_file_range every few MiB),
  // not all at the closing fsync.
  options.bytes_per_sync = 4 << 20;
  return options;
}

// The 8-byte big-endian checksum string back to its value.
absl::StatusOr<uint64_t> DecodeChecksum(const std::string& checksum,
                                        const std::string& path) {
  if (checksum.size() != 8) {
    return absl::InternalError(absl::StrCat("checkpoint file '", path, "': a ",
                                            checksum.size(),
                                            "-byte file checksum, expected 8"));
  }
  return DecodeKey(checksum.data());
}

}  // namespace

absl::StatusOr<TableFileSummary> WriteTableFile(
    const TableSnapshot& snapshot, const std::string& path,
    const TableFileWriteOptions& write_options) {
  const std::string temporary = path + ".tmp";
  // The file is written with direct IO (no copy into the page cache, whose
  // pages a checkpoint would only evict the table's from) behind the writer:
  // SstFileWriter builds the next 4 MiB while the disk takes the last ones.
  // File systems without direct IO (tmpfs before Linux 6.6, some network
  // file systems) get ordinary writes.
  const std::unique_ptr<rocksdb::Env> env =
      embedding::internal::NewWriteBehindEnv(
          kWriteBehindBytes, write_options.file_system != nullptr
                                 ? write_options.file_system
                                 : rocksdb::FileSystem::Default());
  rocksdb::Options options = FileOptions();
  options.env = env.get();
  rocksdb::EnvOptions env_options(options);
  env_options.use_direct_writes = true;
  env_options.writable_file_max_buffer_size = kWriteBufferBytes;
  // With direct IO there are no pages of the file to drop from the cache.
  auto writer = std::make_unique<rocksdb::SstFileWriter>(
      env_options, options, nullptr, /*invalidate_page_cache=*/false);
  if (!writer->Open(temporary).ok()) {
    env_options.use_direct_writes = false;
    writer = std::make_unique<rocksdb::SstFileWriter>(env_options, options);
    RETURN_IF_ERROR(FromRocks(writer->Open(temporary), "open", temporary));
  }
  TableFileSummary summary;
  // Two threads: this one reads the snapshot (the spill tier's iterator)
  // into a batch while a second one adds the previous batch to the file.
  const size_t record_bytes = snapshot.record_bytes();
  const size_t batch_rows =
      std::max<size_t>(1, kWriteBatchBytes / (record_bytes + 8));
  struct Batch {
    std::vector<uint64_t> keys;
    std::vector<char> records;
    std::vector<bool> removed;
  };
  const auto& states = snapshot.admission_states();
  std::vector<uint64_t> stripe_rows(snapshot.incremental() ? 0 : states.size());
  Batch filling, writing;
  std::future<absl::Status> written;
  const auto add_to_file = [&](const Batch& batch) -> absl::Status {
    char key[8];
    for (size_t i = 0; i < batch.keys.size(); ++i) {
      EncodeKey(batch.keys[i], key);
      const rocksdb::Slice value =
          batch.removed[i]
              ? rocksdb::Slice()
              : rocksdb::Slice(batch.records.data() + i * record_bytes,
                               record_bytes);
      RETURN_IF_ERROR(FromRocks(writer->Put(rocksdb::Slice(key, 8), value),
                                "put", temporary));
    }
    return absl::OkStatus();
  };
  // Waits for the batch being written, then hands it `filling`.
  const auto hand_over = [&]() -> absl::Status {
    if (written.valid()) RETURN_IF_ERROR(written.get());
    std::swap(filling, writing);
    filling.keys.clear();
    filling.records.clear();
    filling.removed.clear();
    written = std::async(std::launch::async, [&add_to_file, &writing] {
      return add_to_file(writing);
    });
    return absl::OkStatus();
  };
  absl::Status read =
      snapshot.ForEach([&](uint64_t row_key, const char* record) {
        if (!stripe_rows.empty() && record != nullptr) {
          ++stripe_rows[snapshot.StripeOfKey(row_key)];
        }
        filling.keys.push_back(row_key);
        filling.removed.push_back(record == nullptr);
        if (record == nullptr) {
          filling.records.resize(filling.records.size() + record_bytes);
        } else {
          filling.records.insert(filling.records.end(), record,
                                 record + record_bytes);
        }
        ++(record == nullptr ? summary.removed : summary.rows);
        if (filling.keys.size() >= batch_rows) return hand_over();
        return absl::OkStatus();
      });
  if (read.ok()) read = hand_over();
  if (written.valid()) read.Update(written.get());
  RETURN_IF_ERROR(read);
  RETURN_IF_ERROR(FromRocks(
      writer->Put(
          TableFileInfoKey(),
          absl::StrCat(kTableFileTag, " record_bytes=", snapshot.record_bytes(),
                       " incremental=", snapshot.incremental() ? 1 : 0,
                       " stripes=", states.size())),
      "put", temporary));
  for (uint32_t s = 0; s < states.size(); ++s) {
    if (states[s].empty()) continue;
    RETURN_IF_ERROR(FromRocks(writer->Put(TableFileAdmissionKey(s), states[s]),
                              "put", temporary));
  }
  if (!stripe_rows.empty()) {
    std::string counts(stripe_rows.size() * 8, '\0');
    for (size_t i = 0; i < stripe_rows.size(); ++i) {
      EncodeKey(stripe_rows[i], counts.data() + i * 8);
    }
    RETURN_IF_ERROR(FromRocks(writer->Put(TableFileStripeRowsKey(), counts),
                              "put", temporary));
  }
  rocksdb::ExternalSstFileInfo info;
  RETURN_IF_ERROR(FromRocks(writer->Finish(&info), "finish", temporary));
  RETURN_IF_ERROR(SyncPath(temporary));
  ASSIGN_OR_RETURN(summary.xxh3, DecodeChecksum(info.file_checksum, temporary));
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    return ErrnoStatus(
        error, absl::StrCat("cannot rename '", temporary, "' to '", path,
                            "': ", std::strerror(error)));
  }
  summary.bytes = info.file_size;
  return summary;
}

namespace {

// Where ReadAndApply puts rows: a table, or a sink of embeddings of
// `sink_dim` floats (exactly one of the two).
struct Target {
  Table* table = nullptr;
  ValuesSink* sink = nullptr;
  int32_t sink_dim = 0;
};

// RestoreTableFile's reading and applying. Once it knows how much of the
// file it reads itself, it starts the whole-file checksum with
// `start_checksum`; `verify` returns the checksum's verdict (starting it if
// need be, waiting for it) and must pass before anything is applied to
// `target`.
absl::StatusOr<TableFileRestore> ReadAndApply(
    const std::string& path, const Target& target,
    const std::function<bool(uint64_t)>& keep, const ValuesOnly* values_only,
    absl::FunctionRef<void(PageCache)> start_checksum,
    absl::FunctionRef<absl::Status()> verify) {
  const rocksdb::Options options = FileOptions();
  rocksdb::SstFileReader reader(options);
  RETURN_IF_ERROR(FromRocks(reader.Open(path), "open", path));
  // No separate VerifyChecksum pass: every block read below verifies its
  // own checksum, and the whole-file XXH3 is checked besides.

  Table* const table = target.table;
  ValuesSink* const sink = target.sink;
  // The records it takes: a sink's, cut after the embedding.
  const int32_t dim = table != nullptr ? table->spec().dim : target.sink_dim;
  const size_t record_bytes = RowRecordBytes(
      dim, table != nullptr ? OptimizerStateFloats(table->spec().optimizer, dim)
                            : 0);
  rocksdb::ReadOptions read;
  read.verify_checksums = true;
  read.readahead_size = 4 << 20;
  std::unique_ptr<rocksdb::Iterator> it(reader.NewIterator(read));

  // The info entry first: it names the record size.
  it->Seek(TableFileInfoKey());
  if (!it->Valid() || it->key() != TableFileInfoKey()) {
    RETURN_IF_ERROR(FromRocks(it->status(), "read", path));
    return absl::DataLossError(
        absl::StrCat("checkpoint file '", path,
                     "' has no info entry (not an embedps "
                     "table file, or cut short)"));
  }
  TableFileRestore result;
  size_t file_record_bytes = 0;
  size_t stripes = 0;
  {
    const std::string info = it->value().ToString();
    if (!absl::StartsWith(info, kTableFileTag)) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint file '", path, "' has format '", info,
                       "'; this build reads '", kTableFileTag, "'"));
    }
    for (absl::string_view field : absl::StrSplit(info, ' ')) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(field, absl::MaxSplits('=', 1));
      uint64_t value = 0;
      if (!absl::SimpleAtoi(kv.second, &value)) continue;
      if (kv.first == "record_bytes") file_record_bytes = value;
      if (kv.first == "incremental") result.incremental = value != 0;
      if (kv.first == "stripes") stripes = value;
    }
  }
  // Values only: the table keeps no optimizer state, the file's records
  // are cut after the embedding (a record is metadata, embedding, state),
  // which may be encoded into the table's row.
  const bool encode = values_only != nullptr && values_only->encode != nullptr;
  const bool cut =
      sink != nullptr
          ? file_record_bytes > record_bytes
          : values_only != nullptr && record_bytes == RowRecordBytes(dim, 0) &&
                (encode
                     ? file_record_bytes >= RowRecordBytes(values_only->dim, 0)
                     : file_record_bytes > record_bytes &&
                           values_only->dim == dim);
  if ((file_record_bytes != record_bytes || encode) && !cut) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint file '", path, "' holds rows of ", file_record_bytes,
        " bytes; ",
        table != nullptr ? absl::StrCat("table '", table->spec().name, "'")
                         : absl::StrCat("embeddings of dim ", dim),
        " need ", record_bytes, " (dim or optimizer changed?)"));
  }
  result.admission_states.assign(stripes, "");
  // The other metadata entries (they follow the info entry).
  std::vector<uint64_t> stripe_rows;
  const std::string admission_prefix = TableFileAdmissionPrefix();
  for (it->Next(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    if (key.size() == admission_prefix.size() + 4 &&
        key.starts_with(admission_prefix)) {
      const uint32_t stripe = static_cast<uint32_t>(
          DecodeKey(key.data() + key.size() - 8) & 0xffffffffu);
      if (stripe >= stripes) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint file '", path, "': admission state of stripe ", stripe,
            " but the file has ", stripes, " stripes"));
      }
      result.admission_states[stripe] = value.ToString();
    } else if (key == TableFileStripeRowsKey() && value.size() == stripes * 8) {
      stripe_rows.resize(stripes);
      for (size_t s = 0; s < stripes; ++s) {
        stripe_rows[s] = DecodeKey(value.data() + s * 8);
      }
    }
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "read", path));

  const bool spills = table != nullptr && table->spills();
  const bool adopt_whole_file =
      spills && !result.incremental && !keep && !cut &&
      stripe_rows.size() == static_cast<size_t>(table->spec().num_stripes);
  // A file adopted whole is read here only in part: its checksum reads it
  // around the page cache (at the disk's rate, without a copy). Otherwise
  // this thread reads all of it, and the checksum's read, running ahead
  // through the page cache, fetches it for this one.
  start_checksum(adopt_whole_file ? PageCache::kBypass : PageCache::kUse);
  if (adopt_whole_file) {
    // A whole full file joins the spill tier as it is. Only its first
    // rows are read, as many as the memory budget holds: they go to memory.
    const size_t prefix_limit = table->spec().memory_budget_bytes;
    std::vector<uint64_t> keys;
    std::vector<char> records;
    for (it->SeekToFirst(); it->Valid() && it->key().size() == 8 &&
                            records.size() + record_bytes <= prefix_limit;
         it->Next()) {
      const uint64_t row_key = DecodeKey(it->key().data());
      const rocksdb::Slice value = it->value();
      if (value.size() != record_bytes) {
        return absl::DataLossError(absl::StrCat(
            "checkpoint file '", path, "': row of key ", row_key, " has ",
            value.size(), " bytes in a full file, expected ", record_bytes));
      }
      keys.push_back(row_key);
      records.insert(records.end(), value.data(), value.data() + value.size());
    }
    RETURN_IF_ERROR(FromRocks(it->status(), "read", path));
    for (uint64_t rows : stripe_rows) result.rows += rows;
    RETURN_IF_ERROR(verify());
    RETURN_IF_ERROR(table->AdoptSpillFile(path, keys, records, stripe_rows));
    return result;
  }

  const size_t batch_rows = std::max<size_t>(
      1, std::min(kRestoreBatchBytes / record_bytes,
                  spills ? SIZE_MAX : kRestoreBatchRowsInMemory));
  const Table::RestoredKeys assume = result.incremental
                                         ? Table::RestoredKeys::kMayExist
                                         : Table::RestoredKeys::kNew;
  std::vector<uint64_t> keys;
  std::vector<char> records;
  std::vector<uint64_t> removed;
  std::vector<float> embedding_floats, row_floats;  // aligned copies
  std::vector<float> sink_embeddings;  // a sink's batch, keys × dim
  const auto flush = [&]() -> absl::Status {
    RETURN_IF_ERROR(verify());
    if (sink != nullptr) {
      if (!keys.empty()) RETURN_IF_ERROR(sink->Rows(keys, sink_embeddings));
      if (!removed.empty()) RETURN_IF_ERROR(sink->Removed(removed));
      sink_embeddings.clear();
    } else {
      if (!keys.empty()) {
        RETURN_IF_ERROR(table->RestoreRows(keys, records, assume));
      }
      if (!removed.empty()) RETURN_IF_ERROR(table->Erase(removed).status());
    }
    keys.clear();
    records.clear();
    removed.clear();
    return absl::OkStatus();
  };
  for (it->SeekToFirst(); it->Valid() && it->key().size() == 8; it->Next()) {
    const uint64_t row_key = DecodeKey(it->key().data());
    const rocksdb::Slice value = it->value();
    if (keep && !keep(row_key)) {
      ++result.skipped;
      continue;
    }
    if (value.empty() && !result.incremental) {
      return absl::DataLossError(absl::StrCat("checkpoint file '", path,
                                              "': the full file lists key ",
                                              row_key, " as removed"));
    }
    if (value.empty()) {
      removed.push_back(row_key);
      ++result.removed;
    } else if (value.size() != file_record_bytes) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint file '", path, "': row of key ", row_key, " has ",
          value.size(), " bytes, expected ", file_record_bytes));
    } else {
      keys.push_back(row_key);
      if (sink != nullptr) {  // the embedding alone, after the metadata
        const size_t at = sink_embeddings.size();
        sink_embeddings.resize(at + static_cast<size_t>(dim));
        std::memcpy(sink_embeddings.data() + at,
                    value.data() + RowRecordBytes(0, 0), dim * sizeof(float));
      } else if (encode) {
        // Metadata as it is, then the encoded embedding.
        const size_t at = records.size();
        records.resize(at + record_bytes);
        std::memcpy(records.data() + at, value.data(), 8);
        embedding_floats.resize(values_only->dim);
        std::memcpy(embedding_floats.data(), value.data() + 8,
                    embedding_floats.size() * sizeof(float));
        row_floats.resize(dim);
        values_only->encode(embedding_floats.data(), row_floats.data());
        std::memcpy(records.data() + at + 8, row_floats.data(),
                    row_floats.size() * sizeof(float));
      } else {
        records.insert(records.end(), value.data(),
                       value.data() + record_bytes);
      }
      ++result.rows;
    }
    if (keys.size() + removed.size() >= batch_rows) RETURN_IF_ERROR(flush());
  }
  RETURN_IF_ERROR(FromRocks(it->status(), "read", path));
  RETURN_IF_ERROR(flush());
  return result;
}

// ReadAndApply against `expected`. Into a table, the checksum is computed
// on a second thread while the file is read, and nothing is applied before
// it matched. Into a sink (whose rows count for nothing until the file
// passed), the file is read once at the pace the rows are taken, and its
// checksum computed after, from the page cache: no read of the whole
// file at the disk's rate beside the work of a serving replica.
absl::StatusOr<TableFileRestore> ReadChecked(
    const std::string& path, const FileChecksum& expected, const Target& target,
    const std::function<bool(uint64_t)>& keep, const ValuesOnly* values_only) {
  const bool xxh3 = expected.kind == FileChecksum::Kind::kXxh3;
  const bool check_after = target.sink != nullptr;
  std::future<absl::StatusOr<uint64_t>> checksum;
  const auto start_checksum = [&](PageCache page_cache) {
    if (checksum.valid()) return;
    checksum =
        std::async(check_after ? std::launch::deferred : std::launch::async,
                   [path, page_cache, xxh3]() -> absl::StatusOr<uint64_t> {
                     if (xxh3) return TableFileXxh3(path, page_cache);
                     ASSIGN_OR_RETURN(const uint32_t crc, FileCrc32(path));
                     return crc;
                   });
  };
  std::optional<absl::Status> verdict;
  bool reading = true;
  const auto verify = [&]() -> absl::Status {
    if (check_after && reading) return absl::OkStatus();
    if (!verdict.has_value()) {
      start_checksum(PageCache::kUse);
      const absl::StatusOr<uint64_t> computed = checksum.get();
      verdict =
          !computed.ok() ? computed.status()
          : *computed == expected.value
              ? absl::OkStatus()
              : absl::DataLossError(absl::StrCat(
                    "checkpoint file '", path,
                    "' is corrupt or truncated: ", xxh3 ? "XXH3 " : "CRC-32 ",
                    *computed, ", the manifest says ", expected.value));
    }
    return *verdict;
  };
  absl::StatusOr<TableFileRestore> result =
      ReadAndApply(path, target, keep, values_only, start_checksum, verify);
  reading = false;
  // A file that fails to read is reported by its checksum first: that
  // names the more basic fault (a missing file, or cut short).
  if (!result.ok() || check_after) RETURN_IF_ERROR(verify());
  return result;
}

}  // namespace

absl::StatusOr<TableFileRestore> RestoreTableFile(
    const std::string& path, uint64_t expected_xxh3, Table& table,
    const std::function<bool(uint64_t)>& keep, const ValuesOnly* values_only) {
  return RestoreTableFile(
      path, FileChecksum{FileChecksum::Kind::kXxh3, expected_xxh3}, table, keep,
      values_only);
}

absl::StatusOr<TableFileRestore> RestoreTableFile(
    const std::string& path, const FileChecksum& expected, Table& table,
    const std::function<bool(uint64_t)>& keep, const ValuesOnly* values_only) {
  Target target;
  target.table = &table;
  return ReadChecked(path, expected, target, keep, values_only);
}

absl::StatusOr<TableFileRestore> ReadTableFileValues(
    const std::string& path, const FileChecksum& expected, int32_t dim,
    ValuesSink& sink, const std::function<bool(uint64_t)>& keep) {
  if (dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("embeddings of dim ", dim, " (must be positive)"));
  }
  Target target;
  target.sink = &sink;
  target.sink_dim = dim;
  return ReadChecked(path, expected, target, keep, /*values_only=*/nullptr);
}

absl::StatusOr<uint64_t> TableFileXxh3(const std::string& path,
                                       PageCache page_cache) {
  Xxh3Generator generator;
  RETURN_IF_ERROR(ReadFileInChunks(
      path,
      [&](absl::string_view chunk) {
        generator.Update(chunk.data(), chunk.size());
      },
      page_cache));
  generator.Finalize();
  return DecodeChecksum(generator.GetChecksum(), path);
}

}  // namespace embedps::checkpoint
