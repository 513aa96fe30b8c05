#include "embedding/admission.h"

#include <vector>

#include "common/status_matchers.h"
#include "embedding/initializer.h"
#include "embedding/table.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

constexpr int kDim = 4;

TableSpec CountSpec(uint32_t min_count) {
  TableSpec spec;
  spec.name = "counted";
  spec.dim = kDim;
  spec.optimizer.kind = OptimizerSpec::Kind::kSgd;
  spec.optimizer.learning_rate = 1.0f;
  spec.admission.kind = AdmissionSpec::Kind::kCount;
  spec.admission.min_count = min_count;
  return spec;
}

std::vector<float> InitialOf(const TableSpec& spec, uint64_t key) {
  std::vector<float> row(spec.dim);
  InitialRow(spec.initializer, spec.seed, key, absl::MakeSpan(row));
  return row;
}

TEST(AdmissionTest, CountFilterAdmitsOnTheKthPull) {
  const TableSpec spec = CountSpec(3);
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
  const std::vector<uint64_t> keys = {10, 20, 30};
  std::vector<float> values(keys.size() * kDim);
  const std::vector<float> grads(keys.size() * kDim, 0.5f);

  for (int pull = 1; pull <= 2; ++pull) {
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
    // Not admitted yet: the initial row comes back, nothing is stored, and
    // a Push is dropped and counted.
    EXPECT_EQ(std::vector<float>(values.begin(), values.begin() + kDim),
              InitialOf(spec, 10));
    ASSERT_OK(table->Push(keys, grads));
    const TableStats stats = table->Stats();
    EXPECT_EQ(stats.rows, 0u);
    EXPECT_EQ(stats.admission_rejected, 3u * pull);
    EXPECT_EQ(stats.pushes_dropped, 3u * pull);
  }
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  EXPECT_EQ(table->Stats().rows, 3u);
  EXPECT_EQ(table->Stats().admitted, 3u);
  // Now pushes apply: w = init - 1.0 * 0.5.
  ASSERT_OK(table->Push(keys, grads));
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  const std::vector<float> init = InitialOf(spec, 10);
  for (int d = 0; d < kDim; ++d) EXPECT_EQ(values[d], init[d] - 0.5f);
  EXPECT_EQ(table->Stats().pushes_dropped, 6u);
}

TEST(AdmissionTest, MinCountOneAdmitsAtOnce) {
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(CountSpec(1)));
  std::vector<float> values(kDim);
  ASSERT_OK(table->Pull({7}, absl::MakeSpan(values)));
  EXPECT_EQ(table->Stats().rows, 1u);
}

TEST(AdmissionTest, LookupNeverCountsAsASighting) {
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(CountSpec(2)));
  std::vector<float> values(kDim);
  bool found[1];
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(
        uint64_t hits,
        table->Lookup({7}, absl::MakeSpan(values), absl::MakeSpan(found),
                      Table::MissingRows::kZeros));
    EXPECT_EQ(hits, 0u);
  }
  ASSERT_OK(table->Pull({7}, absl::MakeSpan(values)));
  EXPECT_EQ(table->Stats().rows, 0u);
}

// The rate at which keys seen once are admitted by a min_count of 2 (false
// positives of the sketch), with the sketch loaded to its aging point.
TEST(AdmissionTest, CountFilterFalsePositiveRateIsWithinTheDocumentedBound) {
  TableSpec spec = CountSpec(2);
  spec.admission.sketch_counters = 1 << 16;  // 64 Ki counters, all stripes
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
  constexpr int kKeys = 200000;  // ~6 sketch widths: exercises aging
  std::vector<uint64_t> keys(kKeys);
  for (int i = 0; i < kKeys; ++i) keys[i] = 0x9E3779B97F4A7C15ull * (i + 1);
  std::vector<float> values(keys.size() * kDim);
  for (int begin = 0; begin < kKeys; begin += 1000) {
    ASSERT_OK(table->Pull(absl::MakeConstSpan(keys).subspan(begin, 1000),
                          absl::MakeSpan(values).subspan(0, 1000 * kDim)));
  }
  const double false_positive_rate =
      static_cast<double>(table->Stats().rows) / kKeys;
  std::printf("count filter false-positive rate: %.4f (bound 0.024)\n",
              false_positive_rate);
  EXPECT_LT(false_positive_rate, 0.024);
  EXPECT_GT(false_positive_rate, 0.0);  // the sketch is finite; some collide
}

TEST(AdmissionTest, ProbabilityFilterAdmitsAboutP) {
  TableSpec spec = CountSpec(2);
  spec.admission.kind = AdmissionSpec::Kind::kProbability;
  spec.admission.probability = 0.25;
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
  constexpr int kKeys = 40000;
  std::vector<uint64_t> keys(kKeys);
  for (int i = 0; i < kKeys; ++i) keys[i] = i;
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  const TableStats stats = table->Stats();
  EXPECT_NEAR(static_cast<double>(stats.rows) / kKeys, 0.25, 0.01);
  EXPECT_EQ(stats.rows + stats.admission_rejected,
            static_cast<uint64_t>(kKeys));
  // A second round admits about a quarter of the rest.
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  EXPECT_NEAR(static_cast<double>(table->Stats().rows) / kKeys, 1 - 0.75 * 0.75,
              0.01);
}

TEST(AdmissionTest, SketchMemoryIsBoundedBySpec) {
  TableSpec spec = CountSpec(2);
  spec.admission.sketch_counters = 1 << 20;
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
  const TableStats stats = table->Stats();
  EXPECT_GE(stats.resident_bytes, uint64_t{1} << 20);
  EXPECT_LT(stats.resident_bytes, (uint64_t{1} << 20) + (64 << 10));
}

}  // namespace
}  // namespace embedps::embedding
