// Throughput of Table::Pull, Lookup and Push next to a bare hash-indexed row
// store, measured in the same run (docs/benchmarks.md has the figures).
//
//   bazel run -c opt //embedding:table_benchmark -- --rows=10000000
//
// The table holds `rows` rows of `dim` floats with Adagrad. Batches of
// `batch` keys are drawn (with replacement: a batch may name a key twice)
// from Zipf(`zipf_s`) over the rows' ranks, and from the uniform
// distribution. The reference is what a plain row store does: an
// absl::flat_hash_map<uint64_t, uint32_t> from key to row number and one
// flat array of rows, gathered key by key with memcpy.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "bench/key_distributions.h"
#include "common/key_hash.h"
#include "embedding/table.h"

ABSL_FLAG(uint64_t, rows, 10'000'000, "rows in the table");
ABSL_FLAG(int32_t, dim, 64, "floats per row");
ABSL_FLAG(int32_t, batch, 100'000, "keys per Pull/Push batch");
ABSL_FLAG(int32_t, batches, 20, "batches per thread per measurement");
ABSL_FLAG(double, zipf_s, 1.05, "Zipf exponent of the skewed key stream");
ABSL_FLAG(int32_t, rounds, 3, "measurements of each figure (median printed)");
ABSL_FLAG(int32_t, max_threads, 2, "largest thread count measured");

namespace embedps::embedding {
namespace {

using Clock = std::chrono::steady_clock;

using bench::KeyOfRank;
using bench::ZipfRanks;

using Batches = std::vector<std::vector<uint64_t>>;

Batches MakeBatches(int count, int size, uint64_t seed,
                    const std::function<uint64_t(std::mt19937_64&)>& rank) {
  std::mt19937_64 rng(seed);
  Batches batches(count);
  for (auto& batch : batches) {
    batch.resize(size);
    for (auto& key : batch) key = KeyOfRank(rank(rng));
  }
  return batches;
}

// Runs `work(thread, batch)` for every batch of every thread, `threads` at
// once; returns keys per second over the wall time.
double RowsPerSecond(
    int threads, const std::vector<Batches>& per_thread,
    const std::function<void(int, const std::vector<uint64_t>&)>& work) {
  uint64_t keys = 0;
  for (int t = 0; t < threads; ++t) {
    for (const auto& b : per_thread[t]) keys += b.size();
  }
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (const auto& batch : per_thread[t]) work(t, batch);
    });
  }
  for (auto& th : pool) th.join();
  const double seconds =
      std::chrono::duration<double>(Clock::now() - start).count();
  return keys / seconds;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The reference row store.
struct BareStore {
  absl::flat_hash_map<uint64_t, uint32_t> index;
  std::unique_ptr<float[]> rows;
  int dim;

  void Gather(const std::vector<uint64_t>& keys, float* out) const {
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = index.find(keys[i]);
      std::memcpy(out + i * dim,
                  rows.get() + static_cast<size_t>(it->second) * dim,
                  sizeof(float) * dim);
    }
  }
  uint64_t bytes() const {
    return index.capacity() * (sizeof(std::pair<uint64_t, uint32_t>) + 1) +
           index.size() * sizeof(float) * dim;
  }
};

int Run() {
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  const int dim = absl::GetFlag(FLAGS_dim);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int batches = absl::GetFlag(FLAGS_batches);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const int max_threads = absl::GetFlag(FLAGS_max_threads);

  std::printf(
      "embedps table benchmark: %llu rows, dim %d, Adagrad, %d-key batches, "
      "%d batches/thread, median of %d rounds, %u hardware threads\n",
      static_cast<unsigned long long>(rows), dim, batch, batches, rounds,
      std::thread::hardware_concurrency());

  TableSpec spec;
  spec.name = "benchmark";
  spec.dim = dim;
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  spec.optimizer.initial_accumulator = 0.1f;
  auto table_or = Table::Create(spec);
  if (!table_or.ok()) {
    std::fprintf(stderr, "%s\n", table_or.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Table> table = std::move(table_or).value();

  // Fill both stores with the same rows.
  auto fill_start = Clock::now();
  BareStore bare{{}, std::unique_ptr<float[]>(new float[rows * dim]), dim};
  bare.index.reserve(0);
  {
    std::vector<uint64_t> keys;
    std::vector<float> values;
    for (uint64_t begin = 0; begin < rows; begin += batch) {
      const uint64_t end = std::min<uint64_t>(rows, begin + batch);
      keys.resize(end - begin);
      for (uint64_t r = begin; r < end; ++r) keys[r - begin] = KeyOfRank(r);
      values.resize(keys.size() * dim);
      if (!table->Pull(keys, absl::MakeSpan(values)).ok()) return 1;
      for (uint64_t r = begin; r < end; ++r) {
        bare.index.emplace(keys[r - begin], static_cast<uint32_t>(r));
        std::memcpy(bare.rows.get() + r * dim,
                    values.data() + (r - begin) * dim, sizeof(float) * dim);
      }
    }
  }
  std::printf("filled both stores in %.1f s\n",
              std::chrono::duration<double>(Clock::now() - fill_start).count());

  const ZipfRanks zipf(rows, absl::GetFlag(FLAGS_zipf_s));
  struct Distribution {
    std::string name;
    std::vector<Batches> per_thread;
  };
  std::vector<Distribution> distributions(2);
  distributions[0].name =
      absl::StrFormat("zipf(%.2f)", absl::GetFlag(FLAGS_zipf_s));
  distributions[1].name = "uniform";
  std::uniform_int_distribution<uint64_t> uniform(0, rows - 1);
  for (int t = 0; t < max_threads; ++t) {
    distributions[0].per_thread.push_back(
        MakeBatches(batches, batch, 100 + t,
                    [&](std::mt19937_64& rng) { return zipf(rng); }));
    distributions[1].per_thread.push_back(
        MakeBatches(batches, batch, 200 + t,
                    [&](std::mt19937_64& rng) { return uniform(rng); }));
  }

  std::vector<std::vector<float>> out(
      max_threads, std::vector<float>(size_t{1} * batch * dim));
  std::vector<std::vector<float>> grads(
      max_threads, std::vector<float>(size_t{1} * batch * dim));
  for (int t = 0; t < max_threads; ++t) {
    std::mt19937 rng(t);
    std::normal_distribution<float> normal(0, 1e-3f);
    for (float& g : grads[t]) g = normal(rng);
  }

  std::vector<std::unique_ptr<bool[]>> found;
  for (int t = 0; t < max_threads; ++t) found.emplace_back(new bool[batch]);
  std::printf("\n%-12s %7s %16s %16s %16s %16s %10s %10s %10s\n", "keys",
              "threads", "bare gather/s", "Pull rows/s", "Lookup rows/s",
              "Push rows/s", "Pull/bare", "Lookup/bare", "Push/bare");
  for (const Distribution& d : distributions) {
    for (int threads = 1; threads <= max_threads; ++threads) {
      std::vector<double> bare_rate, pull_rate, lookup_rate, push_rate;
      for (int round = 0; round < rounds; ++round) {
        bare_rate.push_back(
            RowsPerSecond(threads, d.per_thread,
                          [&](int t, const std::vector<uint64_t>& keys) {
                            bare.Gather(keys, out[t].data());
                          }));
        pull_rate.push_back(
            RowsPerSecond(threads, d.per_thread,
                          [&](int t, const std::vector<uint64_t>& keys) {
                            if (!table->Pull(keys, absl::MakeSpan(out[t])).ok())
                              std::abort();
                          }));
        lookup_rate.push_back(RowsPerSecond(
            threads, d.per_thread,
            [&](int t, const std::vector<uint64_t>& keys) {
              if (!table
                       ->Lookup(keys, absl::MakeSpan(out[t]),
                                absl::MakeSpan(found[t].get(), keys.size()),
                                Table::MissingRows::kZeros)
                       .ok())
                std::abort();
            }));
        push_rate.push_back(
            RowsPerSecond(threads, d.per_thread,
                          [&](int t, const std::vector<uint64_t>& keys) {
                            if (!table->Push(keys, grads[t]).ok()) std::abort();
                          }));
      }
      const double b = Median(bare_rate), pl = Median(pull_rate),
                   lk = Median(lookup_rate), ps = Median(push_rate);
      std::printf(
          "%-12s %7d %14.2f M %14.2f M %14.2f M %14.2f M %9.2fx %10.2fx "
          "%9.2fx\n",
          d.name.c_str(), threads, b / 1e6, pl / 1e6, lk / 1e6, ps / 1e6,
          pl / b, lk / b, ps / b);
    }
  }

  const TableStats stats = table->Stats();
  const double table_overhead =
      static_cast<double>(stats.resident_bytes - stats.payload_bytes) /
      stats.rows;
  const double bare_overhead =
      static_cast<double>(bare.bytes()) / bare.index.size() -
      sizeof(float) * dim;
  std::printf(
      "\nresident bytes per row beyond the vector and optimizer state:\n");
  std::printf("  table %.1f B (resident %.2f GB, payload %.2f GB, %llu rows)\n",
              table_overhead, stats.resident_bytes / 1e9,
              stats.payload_bytes / 1e9,
              static_cast<unsigned long long>(stats.rows));
  std::printf(
      "  bare flat_hash_map store %.1f B (beyond its vectors; it holds no "
      "optimizer state)\n",
      bare_overhead);
  return 0;
}

}  // namespace
}  // namespace embedps::embedding

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return embedps::embedding::Run();
}
