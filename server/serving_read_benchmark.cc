// serving_read_benchmark: what an overlay costs a serving replica's reads
// (server/serving_state.h). One run reads the same Zipf keys from a table
// alone and from the same table under an overlay holding half its keys (as
// after a 1M-row incremental checkpoint applied in place), alternating:
// keys/s of each and their ratio.
//
//   bazel build -c opt //server:serving_read_benchmark
//   bazel-bin/server/serving_read_benchmark [--rows=2000000]
//       [--overlay_rows=1000000] [--dim=64] [--batch=520] [--seconds=3]
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "bench/exit_on_error.h"
#include "bench/key_distributions.h"
#include "bench/timed_loop.h"
#include "embedding/table_spec.h"
#include "proto/tables.pb.h"
#include "server/serving_state.h"
#include "server/table_registry.h"

ABSL_FLAG(uint64_t, rows, 2'000'000, "rows of the base table");
ABSL_FLAG(uint64_t, overlay_rows, 1'000'000, "rows of the overlay over it");
ABSL_FLAG(int32_t, dim, 64, "floats a row");
ABSL_FLAG(int32_t, batch, 520, "keys a read (26 bags of 20: serve_bench's)");
ABSL_FLAG(double, seconds, 3, "seconds each way a round");
ABSL_FLAG(int32_t, rounds, 3, "rounds");

namespace embedps::server {
namespace {

int Run() {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const uint64_t overlay_rows = absl::GetFlag(FLAGS_overlay_rows);
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  const size_t batch = static_cast<size_t>(absl::GetFlag(FLAGS_batch));
  if (rows == 0 || overlay_rows > rows || dim < 1 || batch == 0) {
    std::fprintf(stderr,
                 "serving_read_benchmark: --rows, --dim, --batch > 0 and "
                 "--overlay_rows <= --rows\n");
    return 2;
  }
  TableRegistry::Options options;
  options.num_shards = 0;
  options.serving_rows = true;
  auto registry = std::make_shared<TableRegistry>(options);
  proto::TableConfig config;
  config.set_name("served");
  config.set_dim(dim);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  absl::StatusOr<TableRegistry::CreateResult> created =
      registry->Create(config);
  bench::Die(created.status(), "create");
  absl::StatusOr<TableRegistry::Entry> entry =
      registry->Find(created->table_id);
  bench::Die(entry.status(), "find");

  const size_t record = embedding::RowRecordBytes(dim, 0);
  std::vector<uint64_t> all(rows);
  for (uint64_t r = 0; r < rows; ++r) all[r] = bench::KeyOfRank(r);
  std::sort(all.begin(), all.end());
  constexpr uint64_t kFill = 65536;
  for (uint64_t begin = 0; begin < rows; begin += kFill) {
    const uint64_t end = std::min(rows, begin + kFill);
    std::vector<uint64_t> keys(all.begin() + begin, all.begin() + end);
    std::vector<char> records((end - begin) * record, 0);
    bench::Die(entry->table->RestoreRows(keys, records), "fill");
  }
  entry->table->ReleaseUnusedMemory();
  const auto base = std::make_shared<const ServingTable>(
      registry, entry->table, *entry->config,
      std::vector<std::shared_ptr<const Overlay>>());
  // Every other rank's key: hot and cold rows alike.
  auto overlay = std::make_shared<Overlay>();
  overlay->rows.reserve(overlay_rows);
  overlay->values.reserve(overlay_rows * dim);
  for (uint64_t r = 0; r < overlay_rows; ++r) {
    overlay->rows[bench::KeyOfRank(r * rows / overlay_rows)] =
        static_cast<uint32_t>(r);
    overlay->values.insert(overlay->values.end(), dim, 1.0f);
  }
  const std::shared_ptr<const ServingTable> covered = base->With(overlay);

  const bench::ZipfRanks zipf(rows, 1.05);
  std::mt19937_64 rng(11);
  constexpr size_t kRequests = 4096;
  std::vector<uint64_t> requests(kRequests * batch);
  for (uint64_t& key : requests) key = bench::KeyOfRank(zipf(rng));
  std::vector<float> out(batch * dim);
  const auto measure = [&](const ServingTable& table) {
    return bench::TimedLoop(
        absl::GetFlag(FLAGS_seconds), static_cast<double>(batch),
        [&](size_t i) {
          const size_t r = i % kRequests;
          bench::Die(table.Read(absl::MakeConstSpan(requests).subspan(r * batch,
                                                                      batch),
                                absl::MakeSpan(out)),
                     "read");
        });
  };
  std::printf("serving_read_benchmark: %" PRIu64
              " rows of dim %d, an overlay"
              " of %" PRIu64 ", reads of %zu Zipf(1.05) keys, 1 thread\n",
              rows, dim, overlay_rows, batch);
  std::printf("%-6s %16s %16s %8s\n", "round", "overlay keys/s", "table keys/s",
              "ratio");
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    const double with = measure(*covered);
    const double alone = measure(*base);
    std::printf("%-6d %16.0f %16.0f %7.2fx\n", round, with, alone,
                with / alone);
  }
  return 0;
}

}  // namespace
}  // namespace embedps::server

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::server::Run();
}
