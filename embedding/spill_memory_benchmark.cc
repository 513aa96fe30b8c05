// spill_memory_benchmark: the memory a table with a spill tier holds
// against its budget as its keys grow far past what the budget fits.
//
//   bazel run //embedding:spill_memory_benchmark -- --keys=50000000
//       --budget_mb=500 --dim=16
//
// One table (dim floats, Adagrad) with a memory budget and a RocksDB spill
// tier is filled with `keys` distinct keys (Pulls of 64k-key batches in a
// shuffled order, each followed by a Push of the same keys, as training
// does); `--snapshot_every` keys, an incremental snapshot is taken, as
// periodic checkpoints do. At every tenth of the keys it prints, next to
// the budget: the process's anonymous resident memory above what it held
// before the table existed (RssAnon: the heap, RocksDB's memtables, block
// cache, index and filter blocks), its file-backed resident memory
// (RssFile: the spill tier's mapped pages, which the kernel reclaims under
// pressure), and the table's own count (TableStats::resident_bytes).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/malloc_options.h"
#include "embedding/table.h"

ABSL_FLAG(uint64_t, keys, 10'000'000, "distinct keys filled");
ABSL_FLAG(uint64_t, budget_mb, 500, "the table's memory budget (MiB)");
ABSL_FLAG(int32_t, dim, 16, "floats per row");
ABSL_FLAG(uint64_t, snapshot_every, 0,
          "keys between incremental snapshots (0: none)");
ABSL_FLAG(std::string, dir, "/tmp/embedps_spill_memory_benchmark",
          "spill directory (emptied first)");

namespace embedps::embedding {
namespace {

// kB fields of /proc/self/status, in MiB.
double StatusMiB(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field, 0) == 0) {
      std::vector<std::string> parts =
          absl::StrSplit(line, ' ', absl::SkipEmpty());
      double kb = 0;
      if (parts.size() >= 2 && absl::SimpleAtod(parts[1], &kb)) {
        return kb / 1024.0;
      }
    }
  }
  return -1;
}

uint64_t Mix(uint64_t x) {  // splitmix64: a bijection, keys in random order
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int Run() {
  const uint64_t keys = absl::GetFlag(FLAGS_keys);
  const double budget_mib = static_cast<double>(absl::GetFlag(FLAGS_budget_mb));
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  const uint64_t snapshot_every = absl::GetFlag(FLAGS_snapshot_every);
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::remove_all(dir);

  const double anon_before = StatusMiB("RssAnon:");
  TableSpec spec;
  spec.name = "memory";
  spec.dim = dim;
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  spec.memory_budget_bytes = absl::GetFlag(FLAGS_budget_mb) << 20;
  TableOptions options;
  options.spill_directory = dir;
  absl::StatusOr<std::unique_ptr<Table>> created = Table::Create(spec, options);
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", created.status().ToString().c_str());
    return 1;
  }
  Table& table = **created;
  std::printf(
      "spill_memory_benchmark: %llu keys, dim %d (Adagrad), budget %.0f MiB, "
      "snapshot every %llu keys\n",
      static_cast<unsigned long long>(keys), dim, budget_mib,
      static_cast<unsigned long long>(snapshot_every));
  std::printf("%12s %10s %10s %14s %14s %10s %8s\n", "keys", "resident",
              "spilled", "table MiB", "RssAnon+ MiB", "/ budget", "RssFile");

  constexpr uint64_t kBatch = 65536;
  std::vector<uint64_t> batch(kBatch);
  std::vector<float> values(kBatch * dim), grads(kBatch * dim, 0.01f);
  uint64_t next_report = keys / 10, next_snapshot = snapshot_every;
  double worst = 0;
  const absl::Time start = absl::Now();
  for (uint64_t done = 0; done < keys;) {
    const uint64_t n = std::min(kBatch, keys - done);
    for (uint64_t i = 0; i < n; ++i) batch[i] = Mix(done + i);
    const absl::Span<const uint64_t> span(batch.data(), n);
    absl::Status status =
        table.Pull(span, absl::MakeSpan(values.data(), n * dim));
    if (status.ok()) {
      status = table.Push(span, absl::MakeConstSpan(grads.data(), n * dim));
    }
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    done += n;
    if (snapshot_every > 0 && done >= next_snapshot) {
      next_snapshot += snapshot_every;
      absl::StatusOr<std::unique_ptr<TableSnapshot>> snapshot =
          table.TakeSnapshot(/*only_changed=*/true);
      if (!snapshot.ok()) {
        std::fprintf(stderr, "%s\n", snapshot.status().ToString().c_str());
        return 1;
      }
    }
    if (done >= next_report || done == keys) {
      next_report += keys / 10;
      const TableStats stats = table.Stats();
      const double anon = StatusMiB("RssAnon:") - anon_before;
      worst = std::max(worst, anon / budget_mib);
      std::printf("%12llu %10llu %10llu %14.1f %14.1f %9.2fx %8.1f\n",
                  static_cast<unsigned long long>(done),
                  static_cast<unsigned long long>(stats.resident_rows),
                  static_cast<unsigned long long>(stats.spilled_rows),
                  stats.resident_bytes / 1048576.0, anon, anon / budget_mib,
                  StatusMiB("RssFile:"));
      std::fflush(stdout);
    }
  }
  std::printf(
      "fill: %.1f s; the process's anonymous memory above its start peaked "
      "at %.2fx the budget\n",
      absl::ToDoubleSeconds(absl::Now() - start), worst);
  created->reset();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace embedps::embedding

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();  // as ps_server does
  return embedps::embedding::Run();
}
