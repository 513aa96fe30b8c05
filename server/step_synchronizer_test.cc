#include "server/step_synchronizer.h"

#include <atomic>
#include <limits>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;

std::unique_ptr<embedding::Table> SgdTable() {
  embedding::TableSpec spec;
  spec.name = "t";
  spec.dim = kDim;
  spec.initializer.kind = embedding::InitializerSpec::Kind::kZeros;
  spec.optimizer.kind = embedding::OptimizerSpec::Kind::kSgd;
  spec.optimizer.learning_rate = 1.0f;
  return embedding::Table::Create(spec).value();
}

std::vector<float> Row(embedding::Table& table, uint64_t key) {
  std::vector<float> row(kDim);
  EXPECT_OK(table.Pull({{key}}, absl::MakeSpan(row)));
  return row;
}

// Three workers run 20 SYNC steps concurrently, each step in two parts
// (one of them closing). After every step the row holds the sum of all
// workers' gradients so far, and no Pull ever sees a half-applied step.
TEST(StepSynchronizerTest, SyncStepsFromConcurrentWorkers) {
  auto table = SgdTable();
  StepSynchronizer sync(StepSynchronizer::Mode::kSync, 0, 3, absl::Seconds(20),
                        table.get());
  constexpr int kSteps = 20;
  std::vector<std::thread> workers;
  std::atomic<int> bad_reads{0};
  for (int w = 0; w < 3; ++w) {
    workers.emplace_back([&, w] {
      const std::vector<float> g(kDim, 1.0f);
      for (uint64_t step = 0; step < kSteps; ++step) {
        ASSERT_OK(sync.AwaitPullable(step));
        // Steps before `step` are applied: 3 workers × 2 parts × -1 each.
        std::vector<float> row(kDim);
        ASSERT_OK(table->Pull({{7}}, absl::MakeSpan(row), {step}));
        if (row[0] != -6.0f * step) bad_reads.fetch_add(1);
        ASSERT_OK(sync.Push(100 + w, step, 0, {{7}}, g));
        ASSERT_OK(sync.Push(100 + w, step, 2, {{7}}, g));
      }
    });
  }
  for (auto& t : workers) t.join();
  EXPECT_EQ(bad_reads.load(), 0);
  // The last step is applied once all three closed it.
  EXPECT_EQ(Row(*table, 7)[0], -6.0f * kSteps);
}

TEST(StepSynchronizerTest, SyncRefusesLateStepsAndBadGradients) {
  auto table = SgdTable();
  StepSynchronizer sync(StepSynchronizer::Mode::kSync, 0, 1, absl::Seconds(1),
                        table.get());
  const std::vector<float> g(kDim, 1.0f);
  ASSERT_OK(sync.Push(1, 5, 1, {{3}}, g));
  EXPECT_EQ(Row(*table, 3)[0], -1.0f);
  EXPECT_THAT(sync.Push(1, 5, 1, {{3}}, g),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("after that step was applied")));
  std::vector<float> bad(kDim, 1.0f);
  bad[2] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(sync.Push(1, 6, 1, {{3}}, bad),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Row(*table, 3)[0], -1.0f);
}

// What a Pull that read ahead needs: the step the table was at, and the
// keys of the steps applied since — as long as they are remembered.
TEST(StepSynchronizerTest, SyncRemembersTheKeysOfTheLastAppliedSteps) {
  auto table = SgdTable();
  StepSynchronizer sync(StepSynchronizer::Mode::kSync, 0, 1, absl::Seconds(1),
                        table.get());
  const std::vector<float> g(2 * kDim, 1.0f);
  ASSERT_OK(sync.Push(1, 0, 1, {{1, 2}}, g));
  EXPECT_EQ(sync.AppliedThrough(), 1u);
  constexpr uint64_t kSteps = StepSynchronizer::kRememberedSteps + 3;
  for (uint64_t step = 1; step < kSteps; ++step) {
    ASSERT_OK(sync.Push(1, step, 1, {{10 + step, 1}}, g));
  }
  EXPECT_EQ(sync.AppliedThrough(), kSteps);
  std::vector<std::shared_ptr<const StepSynchronizer::StepKeys>> sets;
  ASSERT_TRUE(sync.ChangedKeys(kSteps - 2, kSteps, &sets));
  ASSERT_EQ(sets.size(), 2u);
  EXPECT_TRUE(sets[0]->contains(10 + kSteps - 2));
  EXPECT_TRUE(sets[1]->contains(1));
  EXPECT_FALSE(sets[1]->contains(2));
  ASSERT_TRUE(sync.ChangedKeys(kSteps, kSteps, &sets));
  EXPECT_TRUE(sets.empty());
  // Forgotten (step 0), and not applied yet.
  EXPECT_FALSE(sync.ChangedKeys(0, kSteps, &sets));
  EXPECT_FALSE(sync.ChangedKeys(kSteps - 1, kSteps + 1, &sets));
  // After an import nothing before it is known.
  ASSERT_OK(sync.ImportState(sync.ExportState()));
  EXPECT_FALSE(sync.ChangedKeys(kSteps - 1, kSteps, &sets));
  EXPECT_TRUE(sync.ChangedKeys(kSteps, kSteps, &sets));
}

std::unique_ptr<embedding::Table> AdagradTable() {
  embedding::TableSpec spec;
  spec.name = "t";
  spec.dim = kDim;
  spec.initializer.kind = embedding::InitializerSpec::Kind::kUniform;
  spec.initializer.low = -0.1f;
  spec.initializer.high = 0.1f;
  spec.optimizer.kind = embedding::OptimizerSpec::Kind::kAdagrad;
  spec.optimizer.learning_rate = 0.1f;
  return embedding::Table::Create(spec).value();
}

// A step of many keys applied in pieces on several threads leaves every
// row as one thread does (each key's update is its own); a step whose sum
// overflowed is refused whole, on either path.
TEST(StepSynchronizerTest, SyncStepsOfManyKeysApplyInPiecesAsInOne) {
  constexpr size_t kKeys = 5 * StepSynchronizer::kKeysPerApplyThread + 7;
  std::vector<uint64_t> keys(kKeys);
  std::vector<float> grads(kKeys * kDim);
  for (size_t i = 0; i < kKeys; ++i) {
    keys[i] = i * 7919 + 3;
    for (int d = 0; d < kDim; ++d) grads[i * kDim + d] = 0.001f * (i % 13 + d);
  }
  std::vector<std::vector<float>> rows;
  for (const int threads : {1, 4}) {
    auto table = AdagradTable();
    StepSynchronizer sync(StepSynchronizer::Mode::kSync, 0, 2, absl::Seconds(5),
                          table.get(), threads);
    std::vector<float> all(kKeys * kDim);
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(all)));  // the rows exist
    for (uint64_t step = 0; step < 3; ++step) {
      ASSERT_OK(sync.Push(1, step, 1, keys, grads));
      ASSERT_OK(sync.Push(2, step, 1, keys, grads));
    }
    // Two workers' huge but finite gradients sum to infinity.
    std::vector<float> huge(grads.size(), 0.0f);
    huge[kDim * (kKeys - 1)] = 3e38f;
    ASSERT_OK(sync.Push(1, 3, 1, keys, huge));
    EXPECT_THAT(sync.Push(2, 3, 1, keys, huge),
                StatusIs(absl::StatusCode::kInvalidArgument));
    std::unique_ptr<bool[]> found(new bool[kKeys]);
    const absl::StatusOr<uint64_t> read = table->Lookup(
        keys, absl::MakeSpan(all), absl::MakeSpan(found.get(), kKeys),
        embedding::Table::MissingRows::kZeros);
    ASSERT_OK(read.status());
    EXPECT_EQ(*read, kKeys);
    rows.push_back(std::move(all));
  }
  EXPECT_EQ(rows[0], rows[1]);
}

TEST(StepSynchronizerTest, SyncPullTimesOutNamingTheStep) {
  auto table = SgdTable();
  StepSynchronizer sync(StepSynchronizer::Mode::kSync, 0, 2,
                        absl::Milliseconds(50), table.get());
  EXPECT_TRUE(sync.Pullable(0));
  ASSERT_OK(sync.AwaitPullable(0));
  EXPECT_TRUE(sync.Pullable(0));
  EXPECT_FALSE(sync.Pullable(1));
  ASSERT_OK(sync.Push(1, 0, 1, {{3}}, std::vector<float>(kDim, 1.0f)));
  EXPECT_FALSE(sync.Pullable(1));
  EXPECT_THAT(sync.AwaitPullable(1),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("1 of 2 workers have pushed it")));
  ASSERT_OK(sync.Push(2, 0, 1, {{3}}, std::vector<float>(kDim, 1.0f)));
  EXPECT_TRUE(sync.Pullable(1));
  EXPECT_FALSE(sync.Pullable(2));
  EXPECT_OK(sync.AwaitPullable(1));
}

TEST(StepSynchronizerTest, SspLetsWorkersRunAheadByTheStaleness) {
  auto table = SgdTable();
  StepSynchronizer ssp(StepSynchronizer::Mode::kSsp, 2, 2,
                       absl::Milliseconds(50), table.get());
  const std::vector<float> g(kDim, 1.0f);
  for (uint64_t step = 0; step < 3; ++step) {
    ASSERT_OK(ssp.AwaitPullable(step));
    ASSERT_OK(ssp.Push(1, step, 1, {{3}}, g));
  }
  // Applied on arrival.
  EXPECT_EQ(Row(*table, 3)[0], -3.0f);
  // Step 3 needs both workers past step 0; worker 2 has done nothing.
  EXPECT_TRUE(ssp.Pullable(2));
  EXPECT_FALSE(ssp.Pullable(3));
  EXPECT_THAT(
      ssp.AwaitPullable(3),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1 of 2 have")));
  ASSERT_OK(ssp.Push(2, 0, 1, {}, {}));
  EXPECT_TRUE(ssp.Pullable(3));
  EXPECT_OK(ssp.AwaitPullable(3));
}

}  // namespace
}  // namespace embedps::server
