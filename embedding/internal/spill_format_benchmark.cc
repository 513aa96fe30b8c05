// spill_format_benchmark: what a spill tier's MultiGet of cold keys costs
// in the spill tier's table format (NewSpillTableFactory) against other
// block-based formats, in one process on the same rows.
//
// Each format gets its own RocksDB instance holding the same rows (one SST
// file per 64 MiB, bulk-loaded, then scanned once so that every page is in
// the page cache and mapped). Batches of distinct keys drawn from the tail
// of Zipf(s) beyond the hottest --resident_fraction of the ranks (the keys
// a spilling table misses) are read with one MultiGet per format, in
// rotating order; the figure is microseconds per key.
//
//   bazel build -c opt //embedding/internal:spill_format_benchmark
//   bazel-bin/embedding/internal/spill_format_benchmark --keys=10000000
//
// Needs about (formats x keys x record_bytes) of page cache: 4 x 5.3 GB at
// 10M keys does not fit a 24 GiB machine; --formats picks some.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "bench/key_distributions.h"
#include "embedding/internal/spill_store.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"

ABSL_FLAG(uint64_t, keys, 10'000'000, "rows in each store");
ABSL_FLAG(int32_t, record_bytes, 520, "bytes per row (dim 64 with Adagrad)");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent");
ABSL_FLAG(double, resident_fraction, 0.095,
          "hottest ranks left out (resident in a spilling table)");
ABSL_FLAG(int32_t, batch, 15'000, "cold keys drawn per batch (before dedup)");
ABSL_FLAG(int32_t, rounds, 100, "batches");
ABSL_FLAG(std::string, formats, "spill,4k_r1_unsorted,checkpoint",
          "formats to compare, the first is the reference: spill (a spill "
          "tier's own files), checkpoint (checkpoint files, which a restore "
          "may adopt into a spill tier), 4k_r1_unsorted (4 KiB blocks, a "
          "restart point per index entry, MultiGet without sorted_input: "
          "the spill tier before 2026-11-24), 1k_r16 (1 KiB blocks, a "
          "restart point every 16 index entries)");
ABSL_FLAG(std::string, dir, "/tmp/embedps_spill_format_benchmark",
          "scratch directory (emptied)");

namespace embedps::embedding_internal {
namespace {

struct Format {
  std::string name;
  std::shared_ptr<rocksdb::TableFactory> table;
  bool sorted_input = true;
  bool fill_cache = true;
};

void Check(const rocksdb::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

std::shared_ptr<rocksdb::TableFactory> BlockBased(int block_size,
                                                  int index_restart) {
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(64 << 20);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.block_size = block_size;
  table.index_block_restart_interval = index_restart;
  return std::shared_ptr<rocksdb::TableFactory>(
      rocksdb::NewBlockBasedTableFactory(table));
}

Format FormatNamed(const std::string& name) {
  if (name == "spill") {
    return {name, NewSpillTableFactory(rocksdb::NewLRUCache(64 << 20),
                                       kSpillTierBlockSize)};
  }
  if (name == "spill_nofill") {
    return {name,
            NewSpillTableFactory(rocksdb::NewLRUCache(64 << 20),
                                 kSpillTierBlockSize),
            true, false};
  }
  if (name == "checkpoint") {
    return {name, NewSpillTableFactory(rocksdb::NewLRUCache(64 << 20),
                                       kCheckpointBlockSize)};
  }
  if (name == "4k_r1_unsorted") return {name, BlockBased(4096, 1), false};
  if (name == "1k_r16") return {name, BlockBased(1024, 16)};
  std::fprintf(stderr, "unknown format '%s'\n", name.c_str());
  std::exit(2);
}

// A store of `sorted_keys` in `format`, every page read once.
std::unique_ptr<rocksdb::DB> Load(const Format& format, const std::string& path,
                                  const std::vector<uint64_t>& sorted_keys,
                                  size_t record_bytes) {
  rocksdb::Options options;
  // The spill tier's read path (spill_store.cc).
  options.create_if_missing = true;
  options.allow_mmap_reads = true;
  options.advise_random_on_open = true;
  options.compression = rocksdb::kNoCompression;
  options.table_factory = format.table;
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  rocksdb::DB* raw = nullptr;
  Check(rocksdb::DB::Open(options, path, &raw), "open");
  std::unique_ptr<rocksdb::DB> db(raw);
  const size_t rows_per_file = (64 << 20) / (record_bytes + 8);
  std::vector<std::string> files;
  std::string record(record_bytes, '\x5a');
  char key[8];
  for (size_t begin = 0; begin < sorted_keys.size(); begin += rows_per_file) {
    rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options,
                                  /*column_family=*/nullptr,
                                  /*invalidate_page_cache=*/false);
    files.push_back(path + "/load-" + std::to_string(files.size()) + ".sst");
    Check(writer.Open(files.back()), "writer open");
    const size_t end = std::min(sorted_keys.size(), begin + rows_per_file);
    for (size_t i = begin; i < end; ++i) {
      EncodeKey(sorted_keys[i], key);
      std::memcpy(record.data(), &sorted_keys[i], sizeof(uint64_t));
      Check(writer.Put(rocksdb::Slice(key, 8), record), "writer put");
    }
    Check(writer.Finish(), "writer finish");
  }
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = true;
  Check(db->IngestExternalFile(files, ingest), "ingest");
  rocksdb::ReadOptions scan;
  scan.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(scan));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
  }
  Check(it->status(), "scan");
  return db;
}

int Run() {
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const size_t record_bytes = absl::GetFlag(FLAGS_record_bytes);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::vector<Format> formats;
  for (const auto& name :
       absl::StrSplit(absl::GetFlag(FLAGS_formats), ',', absl::SkipEmpty())) {
    formats.push_back(FormatNamed(std::string(name)));
  }
  if (formats.empty()) return 2;
  std::vector<uint64_t> sorted_keys(keys);
  for (uint64_t r = 0; r < keys; ++r) sorted_keys[r] = bench::KeyOfRank(r);
  std::sort(sorted_keys.begin(), sorted_keys.end());
  std::vector<std::unique_ptr<rocksdb::DB>> dbs;
  for (size_t f = 0; f < formats.size(); ++f) {
    dbs.push_back(Load(formats[f], dir + "/" + formats[f].name, sorted_keys,
                       record_bytes));
  }
  std::printf(
      "spill_format_benchmark: %llu rows of %zu B per store; MultiGet of "
      "distinct keys from Zipf(%.2f) ranks beyond the hottest %.1f%%\n",
      static_cast<unsigned long long>(keys), record_bytes,
      absl::GetFlag(FLAGS_zipf_s),
      100 * absl::GetFlag(FLAGS_resident_fraction));

  const bench::ZipfRanks zipf(keys, absl::GetFlag(FLAGS_zipf_s));
  const uint64_t first_cold =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_resident_fraction) * keys);
  std::mt19937_64 rng(7);
  std::vector<double> seconds(formats.size(), 0);
  uint64_t read = 0;
  const int rounds = absl::GetFlag(FLAGS_rounds);
  for (int round = 0; round < rounds; ++round) {
    std::vector<uint64_t> batch;
    while (batch.size() < static_cast<size_t>(absl::GetFlag(FLAGS_batch))) {
      const uint64_t rank = zipf(rng);
      if (rank >= first_cold) batch.push_back(bench::KeyOfRank(rank));
    }
    std::sort(batch.begin(), batch.end());
    batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
    read += batch.size();
    std::vector<char> encoded(batch.size() * 8);
    std::vector<rocksdb::Slice> slices(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      EncodeKey(batch[i], &encoded[i * 8]);
      slices[i] = rocksdb::Slice(&encoded[i * 8], 8);
    }
    for (size_t k = 0; k < formats.size(); ++k) {
      const size_t f = (k + round) % formats.size();
      std::vector<rocksdb::PinnableSlice> values(batch.size());
      std::vector<rocksdb::Status> statuses(batch.size());
      const auto start = std::chrono::steady_clock::now();
      rocksdb::ReadOptions read;
      read.fill_cache = formats[f].fill_cache;
      dbs[f]->MultiGet(read, dbs[f]->DefaultColumnFamily(), batch.size(),
                       slices.data(), values.data(), statuses.data(),
                       formats[f].sorted_input);
      seconds[f] += std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count();
      for (size_t i = 0; i < batch.size(); ++i) {
        Check(statuses[i], "multiget");
        if (values[i].size() != record_bytes ||
            std::memcmp(values[i].data(), &batch[i], sizeof(uint64_t)) != 0) {
          std::fprintf(stderr, "format %s returned a wrong row\n",
                       formats[f].name.c_str());
          return 1;
        }
      }
    }
  }
  std::printf("%d batches, %llu keys read per format\n", rounds,
              static_cast<unsigned long long>(read));
  for (size_t f = 0; f < formats.size(); ++f) {
    std::printf("  %-16s %6.3f us/key   %.2fx the time of %s\n",
                formats[f].name.c_str(), 1e6 * seconds[f] / read,
                seconds[f] / seconds[0], formats[0].name.c_str());
  }
  dbs.clear();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace embedps::embedding_internal

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::embedding_internal::Run();
}
