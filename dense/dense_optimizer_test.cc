#include "dense/dense_optimizer.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kN = 64;
constexpr int kSteps = 200;

// float64 reference of the same formulas.
std::vector<double> Reference(const DenseOptimizerSpec& s,
                              std::vector<double> p,
                              const std::vector<std::vector<float>>& grads,
                              const DenseOptimizer& schedule) {
  std::vector<double> m(kN, 0), v(kN, 0);
  for (int t = 0; t < kSteps; ++t) {
    const double lr = static_cast<float>(schedule.LearningRate(t));
    const auto& g = grads[t];
    if (s.kind == DenseOptimizerSpec::Kind::kSgd) {
      for (size_t i = 0; i < kN; ++i) {
        m[i] = s.momentum * m[i] + g[i];
        p[i] -= lr * m[i];
      }
      continue;
    }
    if (s.kind == DenseOptimizerSpec::Kind::kAdamW) {
      for (size_t i = 0; i < kN; ++i) p[i] -= lr * s.weight_decay * p[i];
    }
    const double step = t + 1;
    for (size_t i = 0; i < kN; ++i) {
      m[i] = s.beta1 * m[i] + (1 - s.beta1) * g[i];
      v[i] = s.beta2 * v[i] + (1 - s.beta2) * g[i] * g[i];
      p[i] -= lr * (m[i] / (1 - std::pow(s.beta1, step))) /
              (std::sqrt(v[i] / (1 - std::pow(s.beta2, step))) + s.epsilon);
    }
  }
  return p;
}

void CheckAgainstReference(const DenseOptimizerSpec& spec) {
  ASSERT_OK_AND_ASSIGN(auto opt, DenseOptimizer::Create(spec, kN));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0, 0.5f);
  std::vector<float> params(kN);
  for (float& p : params) p = normal(rng);
  const std::vector<double> start(params.begin(), params.end());
  std::vector<std::vector<float>> grads(kSteps, std::vector<float>(kN));
  for (auto& g : grads) {
    for (float& x : g) x = normal(rng);
  }
  for (int t = 0; t < kSteps; ++t)
    ASSERT_OK(opt->Step(absl::MakeSpan(params), grads[t]));
  EXPECT_EQ(opt->steps(), kSteps);
  const std::vector<double> want = Reference(spec, start, grads, *opt);
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < kN; ++i) {
    max_diff = std::max(max_diff, std::abs(params[i] - want[i]));
    max_ref = std::max(max_ref, std::abs(want[i]));
  }
  EXPECT_LT(max_diff / max_ref, 1e-5) << max_diff << " / " << max_ref;
}

TEST(DenseOptimizerTest, SgdWithMomentumMatchesFloat64) {
  DenseOptimizerSpec spec;
  spec.kind = DenseOptimizerSpec::Kind::kSgd;
  spec.learning_rate = 0.01;
  spec.momentum = 0.9;
  CheckAgainstReference(spec);
  spec.momentum = 0;
  CheckAgainstReference(spec);
}

TEST(DenseOptimizerTest, AdamAndAdamWMatchFloat64WithScheduledRates) {
  DenseOptimizerSpec spec;
  spec.kind = DenseOptimizerSpec::Kind::kAdam;
  spec.learning_rate = 0.01;
  spec.beta2 = 0.99;
  spec.epsilon = 1e-3;
  spec.warmup_steps = 20;
  spec.decay = DenseOptimizerSpec::Decay::kCosine;
  spec.total_steps = 180;
  spec.min_learning_rate = 0.001;
  CheckAgainstReference(spec);
  spec.kind = DenseOptimizerSpec::Kind::kAdamW;
  spec.weight_decay = 0.1;
  spec.decay = DenseOptimizerSpec::Decay::kLinear;
  CheckAgainstReference(spec);
}

TEST(DenseOptimizerTest, ScheduleWarmsUpThenDecays) {
  DenseOptimizerSpec spec;
  spec.learning_rate = 1.0;
  spec.warmup_steps = 4;
  spec.decay = DenseOptimizerSpec::Decay::kLinear;
  spec.total_steps = 14;
  spec.min_learning_rate = 0.0;
  ASSERT_OK_AND_ASSIGN(auto opt, DenseOptimizer::Create(spec, 1));
  EXPECT_DOUBLE_EQ(opt->LearningRate(0), 0.25);
  EXPECT_DOUBLE_EQ(opt->LearningRate(3), 1.0);
  EXPECT_DOUBLE_EQ(opt->LearningRate(4), 1.0);
  EXPECT_DOUBLE_EQ(opt->LearningRate(9), 0.5);
  EXPECT_DOUBLE_EQ(opt->LearningRate(14), 0.0);
  EXPECT_DOUBLE_EQ(opt->LearningRate(100), 0.0);
  spec.decay = DenseOptimizerSpec::Decay::kCosine;
  ASSERT_OK_AND_ASSIGN(auto cosine, DenseOptimizer::Create(spec, 1));
  EXPECT_NEAR(cosine->LearningRate(9), 0.5, 1e-12);
}

TEST(DenseOptimizerTest, BadSpecsAndSizesAreRefused) {
  DenseOptimizerSpec spec;
  spec.learning_rate = 0;
  EXPECT_THAT(
      DenseOptimizer::Create(spec, 4),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("learning_rate")));
  spec = {};
  spec.decay = DenseOptimizerSpec::Decay::kCosine;
  EXPECT_THAT(
      DenseOptimizer::Create(spec, 4),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("total_steps")));
  spec = {};
  ASSERT_OK_AND_ASSIGN(auto opt, DenseOptimizer::Create(spec, 4));
  std::vector<float> p(4, 1.0f), g(3, 1.0f);
  EXPECT_THAT(
      opt->Step(absl::MakeSpan(p), g),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("4 parameters")));
  EXPECT_EQ(p, std::vector<float>(4, 1.0f));
  EXPECT_EQ(opt->steps(), 0);
}

// A saved and restored optimizer continues exactly as the original.
TEST(DenseOptimizerTest, RestoredStateContinuesBitForBit) {
  for (DenseOptimizerSpec::Kind kind :
       {DenseOptimizerSpec::Kind::kSgd, DenseOptimizerSpec::Kind::kAdam}) {
    DenseOptimizerSpec spec;
    spec.kind = kind;
    spec.learning_rate = 0.01;
    spec.momentum = kind == DenseOptimizerSpec::Kind::kSgd ? 0.9 : 0.0;
    spec.warmup_steps = 3;
    constexpr size_t kN = 37;
    auto original = DenseOptimizer::Create(spec, kN);
    ASSERT_OK(original.status());
    std::vector<float> params(kN, 0.5f), grads(kN);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal;
    for (int step = 0; step < 5; ++step) {
      for (float& g : grads) g = normal(rng);
      ASSERT_OK((*original)->Step(absl::MakeSpan(params), grads));
    }
    auto restored = DenseOptimizer::Create(spec, kN);
    ASSERT_OK(restored.status());
    ASSERT_OK_AND_ASSIGN(std::string state, (*original)->SaveState());
    ASSERT_OK((*restored)->RestoreState(state));
    EXPECT_EQ((*restored)->steps(), 5);
    std::vector<float> copy = params;
    for (int step = 0; step < 5; ++step) {
      for (float& g : grads) g = normal(rng);
      ASSERT_OK((*original)->Step(absl::MakeSpan(params), grads));
      ASSERT_OK((*restored)->Step(absl::MakeSpan(copy), grads));
    }
    EXPECT_EQ(params, copy);
    auto other_size = DenseOptimizer::Create(spec, kN + 1);
    ASSERT_OK(other_size.status());
    EXPECT_THAT(
        (*other_size)->RestoreState(*(*original)->SaveState()),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs")));
    EXPECT_EQ((*other_size)->steps(), 0);
  }
}

}  // namespace
}  // namespace embedps::dense
