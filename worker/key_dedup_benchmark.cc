// key_dedup_benchmark: a worker's per-step deduplication (KeyDeduplicator,
// ps_worker's Prepare) next to the textbook way, in the same run: one
// absl::flat_hash_map per table, made for the step, reserved to its keys,
// on one thread. Batches as the DLRM job's: --batch samples × 26 slots of
// one table, the slots' values Zipf(1.05) over vocabularies cycling
// through 100, 10k, 300k and 3M (Criteo-like), keys hashed per slot; a
// round of --steps distinct batches, each deduplicated once, alternating.
//
//   bazel build //worker:key_dedup_benchmark
//   bazel-bin/worker/key_dedup_benchmark [--batch=8192] [--threads=2]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "bench/key_distributions.h"
#include "common/key_hash.h"
#include "common/malloc_options.h"
#include "worker/key_dedup.h"

ABSL_FLAG(int32_t, batch, 8192, "samples a step");
ABSL_FLAG(int32_t, slots, 26, "slots, all of one table");
ABSL_FLAG(int32_t, threads, 2, "KeyDeduplicator's threads");
ABSL_FLAG(int32_t, steps, 40, "distinct batches a round");
ABSL_FLAG(int32_t, rounds, 3, "rounds");

namespace embedps::worker {
namespace {

using Batch = std::vector<std::vector<uint64_t>>;  // per slot

std::vector<Batch> MakeBatches(int steps, int batch, int slots) {
  const uint64_t vocab[] = {100, 10'000, 300'000, 3'000'000};
  std::vector<bench::ZipfRanks> zipf;
  for (int s = 0; s < slots; ++s) zipf.emplace_back(vocab[s % 4], 1.05);
  std::mt19937_64 rng(7);
  std::vector<Batch> batches(steps, Batch(slots));
  for (Batch& b : batches) {
    for (int s = 0; s < slots; ++s) {
      b[s].resize(batch);
      for (uint64_t& key : b[s]) {
        key = Mix64(zipf[s](rng) * 64 + static_cast<uint64_t>(s));
      }
    }
  }
  return batches;
}

// The textbook dedup of one step: a map made for it.
void Fresh(const std::vector<absl::Span<const uint64_t>>& slot_keys,
           std::vector<uint64_t>& unique,
           std::vector<std::vector<int32_t>>& index) {
  size_t keys = 0;
  for (const auto& k : slot_keys) keys += k.size();
  absl::flat_hash_map<uint64_t, int32_t> map;
  map.reserve(keys);
  unique.clear();
  index.resize(slot_keys.size());
  for (size_t s = 0; s < slot_keys.size(); ++s) {
    index[s].resize(slot_keys[s].size());
    for (size_t i = 0; i < slot_keys[s].size(); ++i) {
      const auto [it, inserted] =
          map.try_emplace(slot_keys[s][i], static_cast<int32_t>(unique.size()));
      if (inserted) unique.push_back(slot_keys[s][i]);
      index[s][i] = it->second;
    }
  }
}

void Run() {
  const int batch = absl::GetFlag(FLAGS_batch);
  const int slots = absl::GetFlag(FLAGS_slots);
  const int threads = absl::GetFlag(FLAGS_threads);
  const std::vector<Batch> batches =
      MakeBatches(absl::GetFlag(FLAGS_steps), batch, slots);
  std::vector<std::vector<absl::Span<const uint64_t>>> spans;
  for (const Batch& b : batches) spans.emplace_back(b.begin(), b.end());
  KeyDeduplicator dedup(std::vector<int>(slots, 0), 1, threads);
  std::vector<std::vector<uint64_t>> unique;
  std::vector<uint64_t> fresh_unique;
  std::vector<std::vector<int32_t>> index;
  const double keys = static_cast<double>(batch) * slots * batches.size();
  size_t distinct = 0;
  std::printf(
      "dedup of %d samples x %d slots (one table), %zu batches a round\n",
      batch, slots, batches.size());
  std::printf(
      "round  KeyDeduplicator (%d threads)  fresh map (1 thread)  "
      "ratio\n",
      threads);
  std::vector<double> ratios;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    absl::Time start = absl::Now();
    for (const auto& s : spans) dedup.Run(s, unique, index);
    const double ours = keys / absl::ToDoubleSeconds(absl::Now() - start);
    distinct = unique[0].size();
    start = absl::Now();
    for (const auto& s : spans) Fresh(s, fresh_unique, index);
    const double fresh = keys / absl::ToDoubleSeconds(absl::Now() - start);
    ratios.push_back(ours / fresh);
    std::printf("%5d  %20.1fM keys/s  %14.1fM keys/s  %5.2fx\n", round,
                ours / 1e6, fresh / 1e6, ours / fresh);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median ratio %.2fx (%zu distinct keys in the last batch)\n",
              ratios[ratios.size() / 2], distinct);
}

}  // namespace
}  // namespace embedps::worker

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();  // as ps_worker
  embedps::worker::Run();
  return 0;
}
