#include "embedding/internal/spill_policy.h"

#include <algorithm>
#include <cstdint>

#include "gtest/gtest.h"

namespace embedps::embedding_internal {
namespace {

// What PlanSpillBudget gives a table holds within its budget: the reserve
// (memtables, block cache, tracked keys) plus every stripe's rows at their
// planned cost plus the sketches — for budgets from 8 MiB to 64 GiB.
TEST(SpillPolicyTest, ReserveRowsAndSketchesFitTheBudget) {
  constexpr int32_t kRowFloats = 36;  // dim 16, Adagrad, header, padding
  const uint64_t row_cost = sizeof(float) * kRowFloats + 12 + 9;
  for (uint64_t budget = uint64_t{8} << 20; budget <= (uint64_t{64} << 30);
       budget *= 4) {
    embedding::TableSpec spec;
    spec.dim = 16;
    spec.num_stripes = 64;
    spec.memory_budget_bytes = budget;
    const SpillReserve reserve =
        PlanSpillReserve(budget, /*block_cache_limit=*/uint64_t{64} << 20);
    const SpillBudget plan =
        PlanSpillBudget(spec, kRowFloats, /*admission_bytes=*/0, reserve);
    const uint64_t sketches =
        spec.num_stripes * CountMinSketch::kDepth * plan.sketch_width;
    const uint64_t rows =
        spec.num_stripes * plan.max_resident_per_stripe * row_cost;
    EXPECT_LE(reserve.total() + rows + sketches, budget) << budget;
    EXPECT_GE(rows, budget / 2) << "rows keep most of " << budget;
    EXPECT_LE(kMaxMemtables * reserve.memtable_bytes, budget / 8);
    EXPECT_LE(reserve.block_cache_bytes, uint64_t{64} << 20)
        << "the cache stays within TableOptions' limit";
    EXPECT_GE(plan.max_tracked_keys_per_stripe, kMinTrackedKeysPerStripe);
    EXPECT_LE(
        plan.max_tracked_keys_per_stripe * spec.num_stripes * kTrackedKeyBytes,
        std::max(
            reserve.tracked_key_bytes,
            kMinTrackedKeysPerStripe * spec.num_stripes * kTrackedKeyBytes));
  }
}

TEST(SpillPolicyTest, ASmallBudgetKeepsElevenSixteenthsForRows) {
  embedding::TableSpec spec;
  spec.dim = 16;
  spec.num_stripes = 4;
  spec.memory_budget_bytes = 256 << 10;  // below the reserve's floors
  const SpillReserve reserve =
      PlanSpillReserve(spec.memory_budget_bytes, uint64_t{64} << 20);
  ASSERT_GT(reserve.total(), spec.memory_budget_bytes / 16 * 5);
  const SpillBudget plan = PlanSpillBudget(spec, 36, 0, reserve);
  const uint64_t row_cost = sizeof(float) * 36 + 12 + 9;
  EXPECT_GE(plan.max_resident_per_stripe,
            (spec.memory_budget_bytes / 16 * 11 / spec.num_stripes -
             CountMinSketch::kDepth * plan.sketch_width) /
                row_cost);
}

}  // namespace
}  // namespace embedps::embedding_internal
