// Several threads pull and push the same keys at once. With SGD and
// gradients that are small powers of two, every float sum is exact in any
// order, so the final rows must equal the serial result bit for bit: any
// lost or doubled update shows.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "embedding/table.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

constexpr int kDim = 16;
constexpr int kKeys = 2000;
constexpr int kThreads = 4;
constexpr int kBatchesPerThread = 300;
constexpr int kBatchSize = 256;

TableSpec Spec(int32_t stripes) {
  TableSpec spec;
  spec.name = "concurrent";
  spec.dim = kDim;
  spec.num_stripes = stripes;
  spec.initializer.kind = InitializerSpec::Kind::kZeros;
  spec.optimizer.kind = OptimizerSpec::Kind::kSgd;
  spec.optimizer.learning_rate = 0.0625f;  // 2^-4
  return spec;
}

// Thread t's batch b: keys (with duplicates) and power-of-two gradients.
struct Batch {
  std::vector<uint64_t> keys;
  std::vector<float> grads;
};

Batch MakeBatch(int thread, int batch) {
  std::mt19937 rng(thread * 100003 + batch);
  std::uniform_int_distribution<int> key(0, kKeys - 1);
  std::uniform_int_distribution<int> exponent(0, 4);
  std::bernoulli_distribution negative(0.5);
  Batch b;
  b.keys.resize(kBatchSize);
  b.grads.resize(kBatchSize * kDim);
  for (auto& k : b.keys)
    k = static_cast<uint64_t>(key(rng)) * 0x9E3779B97F4A7C15ull;
  for (auto& g : b.grads) {
    g = std::ldexp(1.0f, -exponent(rng)) * (negative(rng) ? -1.0f : 1.0f);
  }
  return b;
}

// With `spill`, the concurrent table keeps about 20 rows per stripe in
// memory and the rest in its spill tier.
void RunAndCompare(int32_t stripes, bool spill = false) {
  TableSpec concurrent_spec = Spec(stripes);
  TableOptions options;
  if (spill) {
    concurrent_spec.memory_budget_bytes = stripes * 20 * 64;
    options.spill_directory =
        absl::StrCat(::testing::TempDir(), "/concurrent_spill_", stripes);
  }
  ASSERT_OK_AND_ASSIGN(auto concurrent,
                       Table::Create(concurrent_spec, std::move(options)));
  ASSERT_OK_AND_ASSIGN(auto serial, Table::Create(Spec(stripes)));

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> pulled(kBatchSize * kDim);
      for (int b = 0; b < kBatchesPerThread; ++b) {
        const Batch batch = MakeBatch(t, b);
        EXPECT_OK(concurrent->Pull(batch.keys, absl::MakeSpan(pulled)));
        EXPECT_OK(concurrent->Push(batch.keys, batch.grads));
        if (b % 50 == 0) concurrent->Stats();  // readers alongside writers
      }
    });
  }
  // A reader that scans and looks up while the writers run.
  threads.emplace_back([&] {
    std::vector<uint64_t> keys(64);
    for (int i = 0; i < 64; ++i) keys[i] = i * 0x9E3779B97F4A7C15ull;
    std::vector<float> values(keys.size() * kDim);
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    for (int round = 0; round < 50; ++round) {
      EXPECT_OK(concurrent->Lookup(keys, absl::MakeSpan(values),
                                   absl::MakeSpan(found.get(), keys.size()),
                                   Table::MissingRows::kZeros));
      uint64_t rows = 0;
      EXPECT_OK(concurrent->Scan([&](const RowView&) { ++rows; }));
      // A row moving between tiers during the scan may be seen twice.
      EXPECT_LE(rows, static_cast<uint64_t>(spill ? 2 * kKeys : kKeys));
    }
  });
  for (auto& thread : threads) thread.join();

  for (int t = 0; t < kThreads; ++t) {
    for (int b = 0; b < kBatchesPerThread; ++b) {
      const Batch batch = MakeBatch(t, b);
      ASSERT_OK(serial->Push(batch.keys, batch.grads));
    }
  }

  std::vector<uint64_t> all(kKeys);
  for (int i = 0; i < kKeys; ++i) all[i] = i * 0x9E3779B97F4A7C15ull;
  std::vector<float> got(all.size() * kDim), want(all.size() * kDim);
  ASSERT_OK(concurrent->Pull(all, absl::MakeSpan(got)));
  ASSERT_OK(serial->Pull(all, absl::MakeSpan(want)));
  int mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] != want[i];
  EXPECT_EQ(mismatches, 0);
  const TableStats stats = concurrent->Stats();
  EXPECT_EQ(stats.pushed_keys,
            static_cast<uint64_t>(kThreads) * kBatchesPerThread * kBatchSize);
  EXPECT_EQ(stats.rows, static_cast<uint64_t>(kKeys));
  if (spill) {
    EXPECT_GT(stats.spills, 0u);
    EXPECT_GT(stats.promotions, 0u);
  }
}

TEST(TableConcurrencyTest, ConcurrentPullPushEqualsSerialBitForBit) {
  RunAndCompare(64);
}

TEST(TableConcurrencyTest, OneStripeEveryBatchContends) { RunAndCompare(1); }

TEST(TableConcurrencyTest, SpillingTableEqualsSerialBitForBit) {
  RunAndCompare(16, /*spill=*/true);
}

TEST(TableConcurrencyTest, SpillingOneStripe) {
  RunAndCompare(1, /*spill=*/true);
}

}  // namespace
}  // namespace embedps::embedding
