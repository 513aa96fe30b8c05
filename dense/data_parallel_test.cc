// Data-parallel training with ranks as threads (Gloo over loopback): two
// ranks × batch B follow one rank × batch 2B step for step. The same
// property across real processes is tests/dense_training_test.
#include "dense/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "dense/collective/gloo_communicator.h"
#include "dense/collective/in_memory_store.h"
#include "dense/synthetic_task.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

constexpr int kBatch = 32;
constexpr int kSteps = 50;

const ModelSpec kSpec = MlpModelSpec(8, {16, 8}, 3);

DenseOptimizerSpec Sgd() {
  DenseOptimizerSpec spec;
  spec.kind = DenseOptimizerSpec::Kind::kSgd;
  spec.learning_rate = 0.2;
  return spec;
}

// Trains `world_size` ranks × `batch` for kSteps; returns rank 0's
// parameters (and checks every rank ends equal).
std::vector<float> Train(int world_size, int batch) {
  InMemoryStore store;
  std::vector<std::vector<float>> result(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.world_size = world_size;
      ASSERT_OK_AND_ASSIGN(auto communicator,
                           CreateGlooCommunicator(options, &store));
      // Different seeds per rank: the trainer's broadcast makes them equal.
      ModelSpec spec = kSpec;
      spec.seed += rank;
      ASSERT_OK_AND_ASSIGN(auto model, CreateModel(spec, {}));
      ASSERT_OK_AND_ASSIGN(auto optimizer, DenseOptimizer::Create(
                                               Sgd(), model->num_parameters()));
      ASSERT_OK_AND_ASSIGN(
          auto trainer, DataParallelTrainer::Create(
                            model.get(), communicator.get(), optimizer.get()));
      SyntheticTaskSpec task_spec;
      task_spec.input_dim = kSpec.num_dense;
      ASSERT_OK_AND_ASSIGN(auto task, SyntheticTask::Create(task_spec));
      std::vector<float> dense(batch * kSpec.num_dense), labels(batch);
      for (int step = 0; step < kSteps; ++step) {
        const int64_t first =
            static_cast<int64_t>(step) * world_size * batch + rank * batch;
        task->Fill(first, batch, absl::MakeSpan(dense), absl::MakeSpan(labels));
        Batch<float> b;
        b.size = batch;
        b.dense = dense;
        b.labels = labels;
        ASSERT_OK(trainer->Step(b, {}).status());
      }
      EXPECT_EQ(trainer->steps(), kSteps);
      result[rank].resize(model->num_parameters());
      ASSERT_OK(model->GetParameters(absl::MakeSpan(result[rank])));
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 1; rank < world_size; ++rank) {
    EXPECT_EQ(result[rank], result[0]) << "rank " << rank;
  }
  return result[0];
}

TEST(DataParallelTest, TwoRanksOfBMatchOneRankOf2B) {
  const std::vector<float> two = Train(2, kBatch);
  const std::vector<float> one = Train(1, 2 * kBatch);
  ASSERT_EQ(two.size(), one.size());
  double worst = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(two[i]) - one[i]) /
                                std::max(1.0, std::abs(1.0 * one[i])));
  }
  std::printf("worst relative parameter difference after %d steps: %.3g\n",
              kSteps, worst);
  // Only the order of float additions differs (the allreduce sums two
  // half-batch means): 50 steps stay within a few float32 ulps of 1.
  EXPECT_LT(worst, 1e-5);
  // And training moved the parameters (the comparison is not vacuous).
  ASSERT_OK_AND_ASSIGN(auto fresh, CreateModel(kSpec, {}));
  std::vector<float> initial(fresh->num_parameters());
  ASSERT_OK(fresh->GetParameters(absl::MakeSpan(initial)));
  EXPECT_NE(initial, one);
}

// The worker starts its Pushes in row_gradients_ready: by then the row
// gradients are written and the dense parameters not yet stepped.
TEST(DataParallelTest, RowGradientsAreReadyBeforeTheOptimizerStep) {
  InMemoryStore store;
  GlooOptions options;
  ASSERT_OK_AND_ASSIGN(auto communicator,
                       CreateGlooCommunicator(options, &store));
  ModelSpec spec;
  spec.num_dense = 3;
  spec.bottom = {4};
  spec.embedding_dim = 4;
  spec.slots = {Pooling::kSum, Pooling::kSum};
  spec.top = {5};
  ASSERT_OK_AND_ASSIGN(auto model, CreateModel(spec, {}));
  ASSERT_OK_AND_ASSIGN(auto optimizer,
                       DenseOptimizer::Create(Sgd(), model->num_parameters()));
  ASSERT_OK_AND_ASSIGN(
      auto trainer, DataParallelTrainer::Create(model.get(), communicator.get(),
                                                optimizer.get()));
  constexpr int kSamples = 6;
  std::vector<float> dense(kSamples * 3), labels(kSamples), rows(kSamples * 4);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = 0.1f * (i % 7) - 0.3f;
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = 0.05f * (i % 5) - 0.1f;
  for (int i = 0; i < kSamples; ++i) labels[i] = static_cast<float>(i % 2);
  std::vector<int32_t> offsets(kSamples + 1);
  for (int i = 0; i <= kSamples; ++i) offsets[i] = i;
  Batch<float> batch;
  batch.size = kSamples;
  batch.dense = dense;
  batch.labels = labels;
  batch.slots = {{rows, offsets}, {rows, offsets}};
  std::vector<float> g0(rows.size(), 0.0f), g1(rows.size(), 0.0f);
  const std::vector<absl::Span<float>> grads = {absl::MakeSpan(g0),
                                                absl::MakeSpan(g1)};
  std::vector<float> before(model->num_parameters()),
      during(model->num_parameters()), after(model->num_parameters());
  ASSERT_OK(model->GetParameters(absl::MakeSpan(before)));
  int calls = 0;
  bool rows_written = false;
  ASSERT_OK(
      trainer
          ->Step(batch, grads,
                 [&] {
                   ++calls;
                   rows_written = std::any_of(g0.begin(), g0.end(),
                                              [](float g) { return g != 0; }) &&
                                  std::any_of(g1.begin(), g1.end(),
                                              [](float g) { return g != 0; });
                   ASSERT_OK(model->GetParameters(absl::MakeSpan(during)));
                 })
          .status());
  ASSERT_OK(model->GetParameters(absl::MakeSpan(after)));
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(rows_written);
  EXPECT_EQ(during, before);
  EXPECT_NE(after, before);
}

TEST(SyntheticTaskTest, AnySliceIsTheSameData) {
  ASSERT_OK_AND_ASSIGN(auto task, SyntheticTask::Create({}));
  const int dim = task->input_dim();
  std::vector<float> all(20 * dim), all_labels(20), all_logits(20);
  task->Fill(0, 20, absl::MakeSpan(all), absl::MakeSpan(all_labels),
             absl::MakeSpan(all_logits));
  std::vector<float> part(5 * dim), part_labels(5);
  task->Fill(10, 5, absl::MakeSpan(part), absl::MakeSpan(part_labels));
  EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + 10 * dim));
  EXPECT_TRUE(std::equal(part_labels.begin(), part_labels.end(),
                         all_labels.begin() + 10));
  // Labels follow the teacher: the Bayes loss is below the coin's ln 2.
  std::vector<float> dense(4096 * dim), labels(4096), logits(4096);
  task->Fill(1000, 4096, absl::MakeSpan(dense), absl::MakeSpan(labels),
             absl::MakeSpan(logits));
  EXPECT_LT(MeanLogLoss(logits, labels), 0.6);
  EXPECT_GT(std::count(labels.begin(), labels.end(), 1.0f), 4096 / 10);
}

}  // namespace
}  // namespace embedps::dense
