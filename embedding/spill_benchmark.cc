// spill_benchmark: the spill tier and checkpoints at scale (issue 4's
// numbers), each next to its comparison measured in the same run.
//
//   bazel run -c opt //embedding:spill_benchmark -- --keys=10000000
//
// 1. Pull keys/s, 100k-key batches from Zipf(s) over `keys` rows of `dim`
//    floats with Adagrad, for (a) a table with everything in memory, (b) a
//    table whose memory budget is `budget_fraction` of its rows' bytes
//    (the rest spilled to RocksDB), (c) raw RocksDB MultiGet of the same
//    batches (sort, dedup, MultiGet, scatter) from a store holding every
//    row, with the spill tier's options. Batches interleave (a), (b), (c).
// 2. Checkpoint of the spilling table: the pause (TakeSnapshot, full and
//    incremental), write MB/s (file bytes / time, fsync included) and
//    restore MB/s (page cache dropped first when allowed), next to `dd`
//    sequential write (oflag=direct) and read (iflag=direct) of the same
//    directory.
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/key_distributions.h"
#include "checkpoint/table_file.h"
#include "embedding/initializer.h"
#include "embedding/internal/spill_store.h"
#include "embedding/table.h"

ABSL_FLAG(uint64_t, keys, 10'000'000, "rows in each table");
ABSL_FLAG(int32_t, dim, 64, "floats per row");
ABSL_FLAG(double, budget_fraction, 0.1,
          "memory budget of the spilling table, as a fraction of its rows' "
          "record bytes");
ABSL_FLAG(int32_t, batch, 100'000, "keys per Pull batch");
ABSL_FLAG(int32_t, warmup_batches, 20,
          "Zipf batches for every store before measuring");
ABSL_FLAG(int32_t, max_steady_state_batches, 400,
          "after the warm-up, Zipf batches for (b) alone until its miss rate "
          "settles (the fill leaves rows resident in key order, not by "
          "popularity; the measurement should see the resident set of a "
          "long-running server): until 20 batches miss less than 0.5% less "
          "often than the 20 before them, at most this many; 0 measures "
          "from the fill's resident set");
ABSL_FLAG(int32_t, batches, 30, "measured Zipf batches");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent");
ABSL_FLAG(std::string, dir, "/tmp/embedps_spill_benchmark",
          "scratch directory on the disk to measure (emptied first)");
ABSL_FLAG(uint64_t, block_cache_mb, 64, "RocksDB block cache per store");
ABSL_FLAG(bool, spill_read_around, false,
          "both RocksDB stores let the kernel read around each miss "
          "(TableOptions::spill_read_around)");
ABSL_FLAG(uint64_t, ttl_steps, 0,
          "a TTL for both tables, in steps (0: none; the Pulls do not reach "
          "it): rows that leave memory unchanged then write their access "
          "metadata (a RocksDB Merge each) instead of nothing");
ABSL_FLAG(bool, warm_page_cache, false,
          "read every file of (b)'s spill tier and of (c) once before the "
          "Pulls, so that both are served from the page cache (on a VM that "
          "drops file pages, as ours does, cold rows — most of (b)'s "
          "misses — are otherwise read from the disk)");
ABSL_FLAG(bool, checkpoint_only, false,
          "measure only the spilling table's checkpoint (skips (a), (c) and "
          "the Pulls)");

namespace embedps::embedding {
namespace {

double Seconds(absl::Time start) {
  return absl::ToDoubleSeconds(absl::Now() - start);
}

void Check(const absl::Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, status.ToString().c_str());
    std::exit(1);
  }
}

// Runs `command` and returns the MB/s dd printed ("... copied, T s, X MB/s"
// -> bytes / T), or -1.
double DdRate(const std::string& command) {
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char line[512];
  double rate = -1;
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    // "N bytes (...) copied, T s, R MB/s"
    unsigned long long bytes = 0;
    double seconds = 0;
    const char* copied = std::strstr(line, "copied, ");
    if (copied != nullptr && std::sscanf(line, "%llu", &bytes) == 1 &&
        std::sscanf(copied + 8, "%lf", &seconds) == 1 && seconds > 0) {
      rate = bytes / seconds / 1e6;
    }
  }
  pclose(pipe);
  return rate;
}

// Reads every file under `dir` once (into the page cache); returns the
// bytes read.
uint64_t ReadAllFiles(const std::string& dir) {
  uint64_t bytes = 0;
  std::vector<char> buffer(4 << 20);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream file(entry.path(), std::ios::binary);
    while (file.read(buffer.data(), buffer.size()) || file.gcount() > 0) {
      bytes += static_cast<uint64_t>(file.gcount());
    }
  }
  return bytes;
}

// Major page faults of this process so far (each one read from the disk).
uint64_t MajorPageFaults() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_majflt);
}

bool DropPageCache() {
  std::ofstream drop("/proc/sys/vm/drop_caches");
  if (!drop) return false;
  sync();
  drop << "3\n";
  return static_cast<bool>(drop);
}

TableSpec Spec(int32_t dim) {
  TableSpec spec;
  spec.name = "bench";
  spec.dim = dim;
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  spec.eviction.ttl = absl::GetFlag(FLAGS_ttl_steps);
  return spec;
}

// Every key of [0, keys) with its initial record, in key order, in
// batches of 100k: `sink(keys, records)`.
void ForEachInitialBatch(
    const TableSpec& spec, uint64_t keys,
    const std::function<void(absl::Span<const uint64_t>,
                             absl::Span<const char>)>& sink) {
  std::vector<uint64_t> all(keys);
  for (uint64_t r = 0; r < keys; ++r) all[r] = bench::KeyOfRank(r);
  std::sort(all.begin(), all.end());
  const int32_t dim = spec.dim;
  const size_t record_bytes =
      RowRecordBytes(dim, OptimizerStateFloats(spec.optimizer, dim));
  constexpr size_t kChunk = 100'000;
  std::vector<char> records;
  std::vector<float> row(dim);
  for (size_t begin = 0; begin < all.size(); begin += kChunk) {
    const size_t n = std::min(kChunk, all.size() - begin);
    records.assign(n * record_bytes, 0);
    for (size_t i = 0; i < n; ++i) {
      InitialRow(spec.initializer, spec.seed, all[begin + i],
                 absl::MakeSpan(row));
      std::memcpy(records.data() + i * record_bytes + 8, row.data(), dim * 4);
    }
    sink(absl::MakeConstSpan(all.data() + begin, n), records);
  }
}

// Pulls every key of [0, keys) once, in batches: creates all rows.
void Fill(Table& table, uint64_t keys, int32_t dim) {
  constexpr uint64_t kChunk = 100'000;
  std::vector<uint64_t> batch;
  std::vector<float> values(kChunk * dim);
  for (uint64_t begin = 0; begin < keys; begin += kChunk) {
    batch.clear();
    for (uint64_t r = begin; r < std::min(keys, begin + kChunk); ++r) {
      batch.push_back(bench::KeyOfRank(r));
    }
    Check(table.Pull(batch, absl::MakeSpan(values.data(), batch.size() * dim)),
          "fill");
  }
}

int Run() {
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  const int32_t batch = absl::GetFlag(FLAGS_batch);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const TableSpec spec = Spec(dim);
  const size_t record_bytes =
      RowRecordBytes(dim, OptimizerStateFloats(spec.optimizer, dim));
  const double rows_gb = keys * record_bytes / 1e9;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::printf(
      "spill_benchmark: %llu keys, dim %d, Adagrad: %zu B/row, "
      "%.2f GB of rows; budget %.0f%%; Zipf(%.2f) batches of %d\n",
      static_cast<unsigned long long>(keys), dim, record_bytes, rows_gb,
      100 * absl::GetFlag(FLAGS_budget_fraction), absl::GetFlag(FLAGS_zipf_s),
      batch);

  const bool checkpoint_only = absl::GetFlag(FLAGS_checkpoint_only);
  // (a) everything in memory.
  absl::Time start = absl::Now();
  auto in_memory = Table::Create(spec);
  Check(in_memory.status(), "create");
  if (!checkpoint_only) {
    Fill(**in_memory, keys, dim);
    std::printf("filled the in-memory table in %.1f s\n", Seconds(start));
  }

  // (b) a budget of a tenth.
  TableSpec budgeted = spec;
  budgeted.memory_budget_bytes = static_cast<uint64_t>(
      absl::GetFlag(FLAGS_budget_fraction) * keys * record_bytes);
  TableOptions options;
  options.spill_directory = dir + "/spill";
  options.spill_block_cache_bytes = absl::GetFlag(FLAGS_block_cache_mb) << 20;
  options.spill_read_around = absl::GetFlag(FLAGS_spill_read_around);
  start = absl::Now();
  auto spilling = Table::Create(budgeted, options);
  Check(spilling.status(), "create spilling");
  // Bulk: the rows in key order through RestoreRows (rows beyond the
  // budget go straight to RocksDB in sorted batches); the Pull path would
  // push every row through eviction, which at 10M rows takes longer than
  // the measurement.
  ForEachInitialBatch(spec, keys,
                      [&](absl::Span<const uint64_t> batch_keys,
                          absl::Span<const char> records) {
                        Check(
                            (*spilling)->RestoreRows(batch_keys, records,
                                                     Table::RestoredKeys::kNew),
                            "fill spilling");
                      });
  TableStats stats = (*spilling)->Stats();
  std::printf(
      "filled the spilling table in %.1f s: %llu resident, %llu "
      "spilled rows, resident %.2f GB of budget %.2f GB\n",
      Seconds(start), static_cast<unsigned long long>(stats.resident_rows),
      static_cast<unsigned long long>(stats.spilled_rows),
      stats.resident_bytes / 1e9, stats.memory_budget_bytes / 1e9);

  // (c) raw RocksDB holding every row, same options.
  embedding_internal::SpillStoreOptions raw_options;
  raw_options.path = dir + "/raw";
  raw_options.record_bytes = record_bytes;
  raw_options.block_cache_bytes = absl::GetFlag(FLAGS_block_cache_mb) << 20;
  raw_options.read_around = absl::GetFlag(FLAGS_spill_read_around);
  auto raw = embedding_internal::SpillStore::Open(raw_options);
  Check(raw.status(), "open raw");
  if (!checkpoint_only) {
    start = absl::Now();
    ForEachInitialBatch(spec, keys,
                        [&](absl::Span<const uint64_t> batch_keys,
                            absl::Span<const char> records) {
                          Check((*raw)->Write(batch_keys, records.data(), {}),
                                "raw write");
                        });
    std::printf("filled raw RocksDB in %.1f s (%.2f GB of SST files)\n",
                Seconds(start), (*raw)->DiskBytes() / 1e9);
  }

  if (!checkpoint_only && absl::GetFlag(FLAGS_warm_page_cache)) {
    start = absl::Now();
    const uint64_t bytes =
        ReadAllFiles(dir + "/spill") + ReadAllFiles(dir + "/raw");
    std::printf(
        "read (b)'s and (c)'s files into the page cache: %.2f GB in %.1f s\n",
        bytes / 1e9, Seconds(start));
  }

  // Pulls: the same Zipf batches for all three, interleaved.
  const bench::ZipfRanks zipf(keys, absl::GetFlag(FLAGS_zipf_s));
  std::mt19937_64 rng(42);
  std::vector<uint64_t> batch_keys(batch);
  std::vector<float> values(static_cast<size_t>(batch) * dim);
  std::vector<char> raw_records;
  std::vector<uint64_t> unique;
  std::unique_ptr<bool[]> found(new bool[batch]);
  const auto next_batch = [&] {
    for (uint64_t& k : batch_keys) k = bench::KeyOfRank(zipf(rng));
  };
  const auto raw_pull = [&] {
    unique.assign(batch_keys.begin(), batch_keys.end());
    std::sort(unique.begin(), unique.end());
    unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
    raw_records.resize(unique.size() * record_bytes);
    Check((*raw)->MultiGet(unique, raw_records.data(),
                           absl::MakeSpan(found.get(), unique.size())),
          "raw multiget");
    for (size_t i = 0; i < batch_keys.size(); ++i) {
      const size_t u =
          std::lower_bound(unique.begin(), unique.end(), batch_keys[i]) -
          unique.begin();
      std::memcpy(values.data() + i * dim,
                  raw_records.data() + u * record_bytes + 8, dim * 4);
    }
  };
  for (int b = 0;
       b < (checkpoint_only ? 0 : absl::GetFlag(FLAGS_warmup_batches)); ++b) {
    next_batch();
    Check((*spilling)->Pull(batch_keys, absl::MakeSpan(values)), "warm");
    raw_pull();
  }
  // Steady state: the miss rate no longer falls.
  int steady_batches = 0;
  double settled_miss_rate = 0;
  if (!checkpoint_only) {
    constexpr int kWindow = 20;
    const auto window_misses = [&] {
      const uint64_t before = (*spilling)->Stats().spill_multiget_keys;
      for (int b = 0; b < kWindow; ++b) {
        next_batch();
        Check((*spilling)->Pull(batch_keys, absl::MakeSpan(values)), "steady");
      }
      steady_batches += kWindow;
      return static_cast<double>((*spilling)->Stats().spill_multiget_keys -
                                 before) /
             (static_cast<double>(kWindow) * batch);
    };
    const int max_batches = absl::GetFlag(FLAGS_max_steady_state_batches);
    if (max_batches > 0) {
      double previous = window_misses();
      settled_miss_rate = previous;
      while (steady_batches + kWindow <= max_batches) {
        settled_miss_rate = window_misses();
        if (settled_miss_rate > 0.995 * previous) break;
        previous = settled_miss_rate;
      }
    }
    std::printf(
        "warm-up: %d batches for every store, then %d for (b) alone "
        "(until its miss rate settled: %.1f%% in the last 20)\n",
        absl::GetFlag(FLAGS_warmup_batches), steady_batches,
        100 * settled_miss_rate);
  }
  const TableStats before = (*spilling)->Stats();
  double t_memory = 0, t_spill = 0, t_raw = 0;
  // Page faults that read from the disk, per store: a spill-tier page the
  // kernel dropped (this VM's DAMON pageout drops file pages untouched for
  // a minute) is read back synchronously, ~4 KiB at a time.
  uint64_t faults_memory = 0, faults_spill = 0, faults_raw = 0;
  uint64_t faults_so_far = MajorPageFaults();
  // Adds the faults since the last call to `counter`.
  const auto count_faults = [&](uint64_t& counter) {
    const uint64_t now = MajorPageFaults();
    counter += now - faults_so_far;
    faults_so_far = now;
  };
  const int batches = checkpoint_only ? 0 : absl::GetFlag(FLAGS_batches);
  for (int b = 0; b < batches; ++b) {
    next_batch();
    start = absl::Now();
    Check((*in_memory)->Pull(batch_keys, absl::MakeSpan(values)), "pull");
    t_memory += Seconds(start);
    count_faults(faults_memory);
    start = absl::Now();
    Check((*spilling)->Pull(batch_keys, absl::MakeSpan(values)), "pull");
    t_spill += Seconds(start);
    count_faults(faults_spill);
    start = absl::Now();
    raw_pull();
    t_raw += Seconds(start);
    count_faults(faults_raw);
  }
  const TableStats after = (*spilling)->Stats();
  const double n = static_cast<double>(batches) * batch;
  const uint64_t missed =
      after.spill_multiget_keys - before.spill_multiget_keys;
  if (!checkpoint_only) {
    std::printf(
        "\nPull, %d batches of %d Zipf(%.2f) keys (%.1f%% of the "
        "spilling table's keys missed memory)\n",
        batches, batch, absl::GetFlag(FLAGS_zipf_s), 100.0 * missed / n);
    std::printf("  %-34s %10.2f M keys/s\n", "(a) all in memory",
                n / t_memory / 1e6);
    std::printf("  %-34s %10.2f M keys/s   %.2fx (a), %.2fx (c)\n",
                "(b) spilling, budget 1/10", n / t_spill / 1e6,
                t_memory / t_spill, t_raw / t_spill);
    std::printf("  %-34s %10.2f M keys/s\n", "(c) raw RocksDB MultiGet",
                n / t_raw / 1e6);
    const uint64_t spills = after.spills - before.spills;
    const uint64_t unchanged =
        after.spills_of_unchanged_rows - before.spills_of_unchanged_rows;
    const uint64_t newcomers =
        after.spills_of_newcomers - before.spills_of_newcomers;
    std::printf(
        "  (b) spilled %lu rows (%.1f%% at the round after they came in), "
        "%.1f%% of them unchanged since read back (%s)\n",
        static_cast<unsigned long>(spills),
        spills == 0 ? 0.0 : 100.0 * newcomers / spills,
        spills == 0 ? 0.0 : 100.0 * unchanged / spills,
        absl::GetFlag(FLAGS_ttl_steps) > 0
            ? "TTL: their access metadata written"
            : "no TTL: nothing written");
    std::printf(
        "  page faults that read the disk during the Pulls: (a) %lu, (b) "
        "%lu, (c) %lu\n",
        static_cast<unsigned long>(faults_memory),
        static_cast<unsigned long>(faults_spill),
        static_cast<unsigned long>(faults_raw));
  }
  raw->reset();
  in_memory->reset();
  std::filesystem::remove_all(dir + "/raw");

  // Checkpoint of the spilling table. The fill's files are written back
  // first: otherwise the checkpoint competes with gigabytes of the fill's
  // dirty pages for the disk (and the rate measures that).
  start = absl::Now();
  ::sync();
  std::printf("\nsync before the checkpoint: %.1f s\n", Seconds(start));
  start = absl::Now();
  auto full = (*spilling)->TakeSnapshot(false);
  Check(full.status(), "snapshot");
  const double full_pause = absl::ToDoubleSeconds((*full)->pause());
  const double full_take = Seconds(start);
  const std::string file = dir + "/full.sst";
  start = absl::Now();
  auto written = checkpoint::WriteTableFile(**full, file);
  Check(written.status(), "write");
  const double write_s = Seconds(start);
  full->reset();
  // Changes for an incremental snapshot: pushes of Zipf batches.
  std::vector<float> grads(values.size(), 0.01f);
  for (int b = 0; b < 10; ++b) {
    next_batch();
    Check((*spilling)->Push(batch_keys, grads), "push");
  }
  start = absl::Now();
  auto increment = (*spilling)->TakeSnapshot(true);
  Check(increment.status(), "snapshot");
  const double incremental_pause = absl::ToDoubleSeconds((*increment)->pause());
  const double incremental_take = Seconds(start);
  start = absl::Now();
  auto increment_written =
      checkpoint::WriteTableFile(**increment, dir + "/incr.sst");
  Check(increment_written.status(), "write");
  const double increment_write_s = Seconds(start);
  increment->reset();
  spilling->reset();

  // Restore into a fresh spilling table with the same budget, page cache
  // dropped first: (1) the file whole, as a restore with the same shard
  // count does (it joins the spill tier as it is); (2) through a key
  // filter, as a resharding restore does (every row rewritten).
  const auto restore_seconds = [&](bool filtered, bool& dropped) {
    dropped = DropPageCache();
    TableOptions restore_options = options;
    restore_options.spill_directory = dir + "/restored";
    auto restored = Table::Create(budgeted, restore_options);
    Check(restored.status(), "create restored");
    const absl::Time begin = absl::Now();
    auto restore = checkpoint::RestoreTableFile(
        file, written->xxh3, **restored,
        filtered ? std::function<bool(uint64_t)>([](uint64_t) { return true; })
                 : nullptr);
    Check(restore.status(), "restore");
    const double seconds = Seconds(begin);
    restored->reset();
    std::filesystem::remove_all(dir + "/restored");
    return seconds;
  };
  bool dropped = false, dropped_filtered = false;
  const double restore_s = restore_seconds(false, dropped);
  const double filtered_restore_s = restore_seconds(true, dropped_filtered);
  dropped = dropped && dropped_filtered;

  const uint64_t dd_mb = std::min<uint64_t>(written->bytes >> 20, 4096);
  const std::string dd_file = dir + "/dd.bin";
  const double dd_write = DdRate(absl::StrCat("dd if=/dev/zero of=", dd_file,
                                              " bs=4M count=", dd_mb / 4,
                                              " oflag=direct conv=fsync"));
  const double dd_read = DdRate(
      absl::StrCat("dd if=", dd_file, " of=/dev/null bs=4M iflag=direct"));
  std::filesystem::remove(dd_file);

  const double file_mb = written->bytes / 1e6;
  std::printf("\nCheckpoint of the spilling table (%llu rows, %.0f MB file)\n",
              static_cast<unsigned long long>(written->rows), file_mb);
  std::printf(
      "  pause, full snapshot          %10.1f ms (locks held while the "
      "resident rows are copied; TakeSnapshot %.0f ms)\n",
      full_pause * 1e3, full_take * 1e3);
  std::printf(
      "  pause, incremental snapshot   %10.1f ms (%llu changed rows "
      "after 10 Zipf push batches; TakeSnapshot %.0f ms, written "
      "in %.2f s)\n",
      incremental_pause * 1e3,
      static_cast<unsigned long long>(increment_written->rows),
      incremental_take * 1e3, increment_write_s);
  std::printf("  write   %8.0f MB/s   dd oflag=direct %8.0f MB/s   %.2fx\n",
              file_mb / write_s, dd_write, file_mb / write_s / dd_write);
  std::printf("  restore %8.0f MB/s   dd iflag=direct %8.0f MB/s   %.2fx%s\n",
              file_mb / restore_s, dd_read, file_mb / restore_s / dd_read,
              dropped ? "" : "  (page cache NOT dropped: not root?)");
  std::printf(
      "  restore through a key filter (resharding: every row rewritten) "
      "%8.0f MB/s   %.2fx\n",
      file_mb / filtered_restore_s, file_mb / filtered_restore_s / dd_read);
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace embedps::embedding

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::embedding::Run();
}
