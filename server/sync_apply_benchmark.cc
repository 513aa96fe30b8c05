// sync_apply_benchmark: what applying a completed SYNC step on several
// threads (StepSynchronizer's apply_threads, ps_server
// --sync_apply_threads) gains over one. One run, alternating: two workers
// push a step of --keys distinct keys (dim 64, Adagrad) to a synchronizer
// applying on one thread and to one applying on --threads; the second
// push completes the step and returns once it is applied, so its time is
// the apply's. Prints keys/s of each and their ratio, per round.
//
//   bazel build -c opt //server:sync_apply_benchmark
//   bazel-bin/server/sync_apply_benchmark [--keys=200000] [--threads=4]
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "bench/exit_on_error.h"
#include "embedding/table.h"
#include "server/step_synchronizer.h"

ABSL_FLAG(uint64_t, keys, 200'000, "distinct keys a step");
ABSL_FLAG(int32_t, dim, 64, "floats a row");
ABSL_FLAG(int32_t, threads, 4, "the apply threads compared with one");
ABSL_FLAG(int32_t, steps, 10, "steps a round each way");
ABSL_FLAG(int32_t, rounds, 3, "rounds");

namespace embedps::server {
namespace {

struct Setup {
  std::unique_ptr<embedding::Table> table;
  std::unique_ptr<StepSynchronizer> sync;
};

Setup Make(int32_t dim, int32_t threads, absl::Span<const uint64_t> keys) {
  embedding::TableSpec spec;
  spec.name = "t";
  spec.dim = dim;
  spec.optimizer.kind = embedding::OptimizerSpec::Kind::kAdagrad;
  spec.optimizer.learning_rate = 0.05f;
  Setup s;
  s.table = bench::Must(embedding::Table::Create(spec), "Table::Create");
  std::vector<float> rows(keys.size() * dim);
  bench::Die(s.table->Pull(keys, absl::MakeSpan(rows)), "Pull");
  s.sync = std::make_unique<StepSynchronizer>(StepSynchronizer::Mode::kSync, 0,
                                              2, absl::Seconds(60),
                                              s.table.get(), threads);
  return s;
}

// Seconds of the completing pushes of `steps` steps from `first`.
double Apply(StepSynchronizer& sync, uint64_t first, int32_t steps,
             absl::Span<const uint64_t> keys, absl::Span<const float> grads) {
  absl::Duration applying;
  for (int32_t i = 0; i < steps; ++i) {
    bench::Die(sync.Push(1, first + i, 1, keys, grads), "Push");
    const absl::Time start = absl::Now();
    bench::Die(sync.Push(2, first + i, 1, keys, grads), "Push");
    applying += absl::Now() - start;
  }
  return absl::ToDoubleSeconds(applying);
}

int Run() {
  const uint64_t n = absl::GetFlag(FLAGS_keys);
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  const int32_t steps = absl::GetFlag(FLAGS_steps);
  std::vector<uint64_t> keys(n);
  std::vector<float> grads(n * dim);
  for (uint64_t i = 0; i < n; ++i) {
    keys[i] = i * 0x9E3779B97F4A7C15ull;
    for (int32_t d = 0; d < dim; ++d) grads[i * dim + d] = 1e-3f * (d + 1);
  }
  Setup one = Make(dim, 1, keys);
  Setup many = Make(dim, threads, keys);
  std::printf("a SYNC step of %" PRIu64 " keys (dim %d, Adagrad), 2 workers\n",
              n, dim);
  std::printf("%6s %16s %16s %7s\n", "round", "1 thread keys/s",
              "N threads keys/s", "ratio");
  uint64_t step = 0;
  std::vector<double> ratios;
  for (int32_t round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    const double a = Apply(*one.sync, step, steps, keys, grads);
    const double b = Apply(*many.sync, step, steps, keys, grads);
    step += steps;
    const double rate_a = n * steps / a, rate_b = n * steps / b;
    ratios.push_back(rate_b / rate_a);
    std::printf("%6d %16.0f %16.0f %6.2fx   (N = %d)\n", round, rate_a, rate_b,
                rate_b / rate_a, threads);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median ratio %.2fx\n", ratios[ratios.size() / 2]);
  return 0;
}

}  // namespace
}  // namespace embedps::server

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::server::Run();
}
