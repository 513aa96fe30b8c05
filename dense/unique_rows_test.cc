#include "dense/unique_rows.h"

#include <cstdint>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;

ModelSpec SpecWithSlots(int slots) {
  ModelSpec spec;
  spec.num_dense = 1;
  spec.embedding_dim = kDim;
  spec.slots.assign(slots, Pooling::kSum);
  return spec;
}

// A batch of `n` samples over two tables: slots 0 and 2 on table 0 (slot
// 2 weighted), slot 1 on table 1; bags of 0..3 keys with repeated rows.
struct Fixture {
  explicit Fixture(int n, uint32_t seed = 1) {
    std::mt19937 random(seed);
    batch.size = n;
    dense.assign(n, 0.5f);
    labels.assign(n, 1.0f);
    const int rows[2] = {50, 7};
    for (int t = 0; t < 2; ++t) {
      table[t].resize(rows[t] * kDim);
      for (float& v : table[t])
        v = std::uniform_real_distribution<float>(-1, 1)(random);
    }
    const int slot_table[3] = {0, 1, 0};
    for (int s = 0; s < 3; ++s) {
      offsets[s].push_back(0);
      for (int b = 0; b < n; ++b) {
        const int keys = static_cast<int>(random() % 4);
        for (int k = 0; k < keys; ++k) {
          index[s].push_back(
              static_cast<int32_t>(random() % rows[slot_table[s]]));
          if (s == 2)
            weights.push_back(
                std::uniform_real_distribution<float>(0, 2)(random));
        }
        offsets[s].push_back(static_cast<int32_t>(index[s].size()));
      }
      gradients[s].resize(index[s].size() * kDim);
      for (float& g : gradients[s])
        g = std::uniform_real_distribution<float>(-1, 1)(random);
    }
    batch.dense = dense;
    batch.labels = labels;
    batch.tables = {table[0], table[1]};
    for (int s = 0; s < 3; ++s) {
      batch.slots.push_back({slot_table[s], index[s], offsets[s],
                             s == 2 ? absl::Span<const float>(weights)
                                    : absl::Span<const float>()});
    }
  }
  UniqueRowsBatch batch;
  std::vector<float> dense, labels, table[2], weights, gradients[3];
  std::vector<int32_t> index[3], offsets[3];
};

TEST(UniqueRowsTest, GatherAndSumMatchTheSerialDefinitionForAnyThreadCount) {
  // Enough keys for several threads (a thread takes at least 16384).
  Fixture f(40000);
  // The definitions, serially.
  std::vector<std::vector<float>> want_rows(3);
  std::vector<float> want_sums[2] = {std::vector<float>(f.table[0].size()),
                                     std::vector<float>(f.table[1].size())};
  const float scale = 0.25f;
  for (int s = 0; s < 3; ++s) {
    const UniqueRowsBatch::Slot& slot = f.batch.slots[s];
    for (size_t k = 0; k < slot.index.size(); ++k) {
      const float w = slot.weights.empty() ? 1.0f : slot.weights[k];
      for (int d = 0; d < kDim; ++d) {
        const float v = f.table[slot.table][slot.index[k] * kDim + d];
        want_rows[s].push_back(slot.weights.empty() ? v : w * v);
        const float by = slot.weights.empty() ? scale : scale * w;
        want_sums[slot.table][slot.index[k] * kDim + d] +=
            by * f.gradients[s][k * kDim + d];
      }
    }
  }
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::vector<float>> rows(3);
    std::vector<absl::Span<float>> row_spans;
    std::vector<absl::Span<const float>> gradient_spans;
    for (int s = 0; s < 3; ++s) {
      rows[s].assign(f.index[s].size() * kDim, -7.0f);
      row_spans.push_back(absl::MakeSpan(rows[s]));
      gradient_spans.push_back(f.gradients[s]);
    }
    GatherSlotRows(f.batch, kDim, row_spans, threads);
    for (int s = 0; s < 3; ++s) EXPECT_EQ(rows[s], want_rows[s]) << threads;
    std::vector<float> sums[2] = {std::vector<float>(f.table[0].size(), -7.0f),
                                  std::vector<float>(f.table[1].size(), -7.0f)};
    std::vector<absl::Span<float>> sum_spans = {absl::MakeSpan(sums[0]),
                                                absl::MakeSpan(sums[1])};
    ASSERT_OK(ValidateTableGradients(f.batch, sum_spans));
    SumUniqueRowGradients(f.batch, kDim, gradient_spans, scale, sum_spans,
                          threads);
    // Bit for bit: the same additions in the same order.
    EXPECT_EQ(sums[0], want_sums[0]) << threads;
    EXPECT_EQ(sums[1], want_sums[1]) << threads;
  }
}

TEST(UniqueRowsTest, ARowNoKeyNamesGetsAZeroGradient) {
  Fixture f(3);
  std::vector<int32_t> index = {0, 0};
  std::vector<int32_t> offsets = {0, 1, 2, 2};
  f.batch.slots = {{0, index, offsets, {}},
                   {0, index, offsets, {}},
                   {0, index, offsets, {}}};
  std::vector<float> g(2 * kDim, 1.0f);
  std::vector<absl::Span<const float>> gradients(3, g);
  std::vector<float> sums0(f.table[0].size(), 5.0f),
      sums1(f.table[1].size(), 5.0f);
  SumUniqueRowGradients(f.batch, kDim, gradients, 1.0f,
                        {absl::MakeSpan(sums0), absl::MakeSpan(sums1)}, 1);
  EXPECT_EQ(sums0[0], 6.0f);  // 3 slots × 2 keys
  EXPECT_EQ(sums0[kDim], 0.0f);
  EXPECT_EQ(sums1[0], 0.0f);
}

TEST(UniqueRowsTest, BatchesThatDoNotFitAreRefusedWithTheNumbers) {
  const ModelSpec spec = SpecWithSlots(3);
  {
    Fixture f(4);
    ASSERT_OK(ValidateUniqueRowsBatch(spec, f.batch, true));
    EXPECT_THAT(ValidateUniqueRowsBatch(SpecWithSlots(2), f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("3 slots; the model has 2")));
  }
  {
    Fixture f(4);
    f.index[1].push_back(7);  // table 1 has 7 rows
    f.offsets[1].back() += 1;
    f.batch.slots[1].index = f.index[1];
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("outside table 1's 7 rows")));
  }
  {
    Fixture f(4);
    f.index[0].push_back(-1);
    f.offsets[0].back() += 1;
    f.batch.slots[0].index = f.index[0];
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("row -1 is outside")));
  }
  {
    Fixture f(4);
    f.batch.slots[0].offsets = absl::MakeSpan(f.offsets[0]).first(3);
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("3 offsets for 4 samples")));
  }
  {
    Fixture f(4);
    f.index[0] = {0, 1};
    f.offsets[0] = {0, 2, 1, 2, 2};
    f.batch.slots[0].index = f.index[0];
    f.batch.slots[0].offsets = f.offsets[0];
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("offsets decrease at bag 1")));
  }
  {
    Fixture f(4);
    f.batch.slots[2].weights = absl::MakeSpan(f.weights).first(0);
    f.batch.slots[0].weights = {f.weights.data(), f.index[0].size() + 1};
    EXPECT_THAT(
        ValidateUniqueRowsBatch(spec, f.batch, true),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weights for")));
  }
  {
    Fixture f(4);
    f.batch.slots[1].table = 2;
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("slot 1 names table 2 of 2")));
  }
  {
    Fixture f(4);
    f.batch.tables[1] = absl::MakeSpan(f.table[1]).first(kDim + 1);
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("not whole rows of 4")));
  }
  {
    Fixture f(4);
    f.batch.labels = absl::MakeSpan(f.labels).first(3);
    EXPECT_THAT(ValidateUniqueRowsBatch(spec, f.batch, true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("3 labels for 4 samples")));
    EXPECT_OK(ValidateUniqueRowsBatch(spec, f.batch, false));
  }
  {
    Fixture f(4);
    std::vector<float> small(3);
    std::vector<float> right(f.table[1].size());
    EXPECT_THAT(ValidateTableGradients(
                    f.batch, {absl::MakeSpan(small), absl::MakeSpan(right)}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("table 0: room for 3")));
    EXPECT_THAT(ValidateTableGradients(f.batch, {absl::MakeSpan(right)}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("1 table gradients for 2 tables")));
  }
}

}  // namespace
}  // namespace embedps::dense
