// values_table_benchmark: a serving replica's Lookup from the values table
// (embedding/values_table.h) against the same rows in the training
// engine's table, in one run: keys/s of batched Lookups and bytes a row.
//
//   bazel build -c opt //embedding:values_table_benchmark
//   bazel-bin/embedding/values_table_benchmark [--rows=2000000] [--dim=64]
//       [--batch=520] [--seconds=3]
//
// Both tables hold the same rows (values only, restored in key order as a
// replica restores a checkpoint file); each round looks up batches of
// Zipf(1.05) keys (ranks scrambled over the key space, a tenth of them absent)
// on one thread, the tables alternating.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/exit_on_error.h"
#include "bench/key_distributions.h"
#include "bench/timed_loop.h"
#include "embedding/table.h"
#include "embedding/values_table.h"

ABSL_FLAG(uint64_t, rows, 2'000'000, "rows of each table");
ABSL_FLAG(int32_t, dim, 64, "floats a row");
ABSL_FLAG(int32_t, batch, 520, "keys a Lookup (26 bags of 20: serve_bench's)");
ABSL_FLAG(double, seconds, 3, "seconds a table a round");
ABSL_FLAG(int32_t, rounds, 3, "rounds (the tables alternate)");

namespace embedps::embedding {
namespace {

int Run() {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  const size_t batch = static_cast<size_t>(absl::GetFlag(FLAGS_batch));
  if (rows == 0 || dim < 1 || batch == 0) {
    std::fprintf(stderr,
                 "values_table_benchmark: --rows, --dim and --batch "
                 "must be > 0\n");
    return 2;
  }
  TableSpec spec;
  spec.name = "served";
  spec.dim = dim;
  spec.optimizer.kind = OptimizerSpec::Kind::kSgd;
  absl::StatusOr<std::unique_ptr<Table>> engine = Table::Create(spec);
  absl::StatusOr<std::unique_ptr<Table>> values = CreateValuesTable(spec);
  bench::Die(engine.status(), "engine table");
  bench::Die(values.status(), "values table");
  const size_t record = RowRecordBytes(dim, 0);
  // In key order, as a replica restores a checkpoint file (rows of hot
  // and cold keys interleaved).
  std::vector<uint64_t> all(rows);
  for (uint64_t r = 0; r < rows; ++r) all[r] = bench::KeyOfRank(r);
  std::sort(all.begin(), all.end());
  constexpr uint64_t kFill = 65536;
  std::vector<uint64_t> keys;
  std::vector<char> records;
  for (uint64_t begin = 0; begin < rows; begin += kFill) {
    const uint64_t end = std::min(rows, begin + kFill);
    keys.assign(all.begin() + begin, all.begin() + end);
    records.assign((end - begin) * record, 0);
    for (uint64_t r = begin; r < end; ++r) {
      float first = static_cast<float>(r);
      std::memcpy(records.data() + (r - begin) * record + 8, &first,
                  sizeof(first));
    }
    bench::Die((*engine)->RestoreRows(keys, records), "fill engine");
    bench::Die((*values)->RestoreRows(keys, records), "fill values");
  }
  (*engine)->ReleaseUnusedMemory();
  (*values)->ReleaseUnusedMemory();

  // Requests drawn once: both tables read the same keys.
  const bench::ZipfRanks zipf(rows + rows / 9, 1.05);
  std::mt19937_64 rng(11);
  constexpr size_t kRequests = 4096;
  std::vector<uint64_t> requests(kRequests * batch);
  for (uint64_t& key : requests) key = bench::KeyOfRank(zipf(rng));
  std::vector<float> out(batch * dim);
  std::unique_ptr<bool[]> found(new bool[batch]);

  const auto measure = [&](Table& table) {
    return bench::TimedLoop(
        absl::GetFlag(FLAGS_seconds), static_cast<double>(batch),
        [&](size_t i) {
          const size_t r = i % kRequests;
          bench::Die(
              table
                  .Lookup(
                      absl::MakeConstSpan(requests).subspan(r * batch, batch),
                      absl::MakeSpan(out), absl::MakeSpan(found.get(), batch),
                      Table::MissingRows::kZeros)
                  .status(),
              "lookup");
        });
  };
  std::printf("values_table_benchmark: %" PRIu64
              " rows of dim %d, Lookups of %zu Zipf(1.05) keys, 1 thread\n",
              rows, dim, batch);
  std::printf("%-6s %16s %16s %8s\n", "round", "values keys/s", "engine keys/s",
              "ratio");
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    const double v = measure(**values);
    const double e = measure(**engine);
    std::printf("%-6d %16.0f %16.0f %7.2fx\n", round, v, e, v / e);
  }
  const TableStats vs = (*values)->Stats();
  const TableStats es = (*engine)->Stats();
  std::printf("bytes a row: values %.1f, engine %.1f (values: %d)\n",
              static_cast<double>(vs.resident_bytes) / vs.rows,
              static_cast<double>(es.resident_bytes) / es.rows, dim * 4);
  return 0;
}

}  // namespace
}  // namespace embedps::embedding

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::embedding::Run();
}
