#include "dense/mlp.h"

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

constexpr int kBatch = 5;
const MlpSpec kSpec{/*input_dim=*/6, /*hidden=*/{7, 4}, /*seed=*/11};

template <typename T>
std::vector<T> Inputs(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, 1);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(normal(rng));
  return v;
}

const std::vector<double> kLabels = {1, 0, 0, 1, 1};

// Central differences in float64 for every parameter and every input.
TEST(MlpTest, GradientsMatchCentralDifferences) {
  ASSERT_OK_AND_ASSIGN(auto mlp, Mlp<double>::Create(kSpec));
  std::vector<double> x = Inputs<double>(kBatch * kSpec.input_dim, 1);
  std::vector<double> dx(x.size());
  ASSERT_OK(mlp->TrainStep(x, kLabels, kBatch, absl::MakeSpan(dx)).status());
  const std::vector<double> analytic(mlp->gradients().begin(),
                                     mlp->gradients().end());
  const auto loss_at = [&]() {
    return mlp->TrainStep(x, kLabels, kBatch).value();
  };
  constexpr double kH = 1e-6;
  double worst = 0;
  absl::Span<double> p = mlp->parameters();
  for (size_t i = 0; i < p.size(); ++i) {
    const double saved = p[i];
    p[i] = saved + kH;
    const double up = loss_at();
    p[i] = saved - kH;
    const double down = loss_at();
    p[i] = saved;
    const double numeric = (up - down) / (2 * kH);
    worst = std::max(
        worst, std::abs(numeric - analytic[i]) /
                   std::max(1e-3, std::abs(numeric) + std::abs(analytic[i])));
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kH;
    const double up = loss_at();
    x[i] = saved - kH;
    const double down = loss_at();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kH);
    worst = std::max(worst,
                     std::abs(numeric - dx[i]) /
                         std::max(1e-3, std::abs(numeric) + std::abs(dx[i])));
  }
  EXPECT_LT(worst, 1e-6);
}

TEST(MlpTest, Float32AgreesWithFloat64) {
  ASSERT_OK_AND_ASSIGN(auto m32, Mlp<float>::Create(kSpec));
  ASSERT_OK_AND_ASSIGN(auto m64, Mlp<double>::Create(kSpec));
  // Same seed: the float model's parameters are the double's, rounded.
  for (size_t i = 0; i < m32->num_parameters(); ++i) {
    ASSERT_EQ(m32->parameters()[i], static_cast<float>(m64->parameters()[i]));
  }
  for (size_t i = 0; i < m32->num_parameters(); ++i) {
    m64->parameters()[i] = m32->parameters()[i];
  }
  const std::vector<float> x32 = Inputs<float>(kBatch * kSpec.input_dim, 2);
  const std::vector<double> x64(x32.begin(), x32.end());
  const std::vector<float> y32(kLabels.begin(), kLabels.end());
  ASSERT_OK_AND_ASSIGN(float loss32, m32->TrainStep(x32, y32, kBatch));
  ASSERT_OK_AND_ASSIGN(double loss64, m64->TrainStep(x64, kLabels, kBatch));
  EXPECT_NEAR(loss32, loss64, 1e-4 * std::abs(loss64));
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < m32->num_parameters(); ++i) {
    max_diff =
        std::max(max_diff, std::abs(m32->gradients()[i] - m64->gradients()[i]));
    max_ref = std::max(max_ref, std::abs(m64->gradients()[i]));
  }
  EXPECT_LT(max_diff / max_ref, 1e-4);
}

TEST(MlpTest, SameSeedSameParametersAndTrainingReducesLoss) {
  ASSERT_OK_AND_ASSIGN(auto a, Mlp<float>::Create(kSpec));
  ASSERT_OK_AND_ASSIGN(auto b, Mlp<float>::Create(kSpec));
  EXPECT_TRUE(std::equal(a->parameters().begin(), a->parameters().end(),
                         b->parameters().begin()));
  const std::vector<float> x = Inputs<float>(kBatch * kSpec.input_dim, 3);
  const std::vector<float> y(kLabels.begin(), kLabels.end());
  ASSERT_OK_AND_ASSIGN(float first, a->TrainStep(x, y, kBatch));
  float last = first;
  for (int step = 0; step < 200; ++step) {
    ASSERT_OK_AND_ASSIGN(last, a->TrainStep(x, y, kBatch));
    for (size_t i = 0; i < a->num_parameters(); ++i) {
      a->parameters()[i] -= 0.1f * a->gradients()[i];
    }
  }
  EXPECT_LT(last, 0.5f * first);
}

TEST(MlpTest, BadInputIsRefused) {
  EXPECT_THAT(Mlp<float>::Create({0, {}, 0}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      Mlp<float>::Create({3, {4, -1}, 0}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden[1]")));
  ASSERT_OK_AND_ASSIGN(auto mlp, Mlp<float>::Create(kSpec));
  std::vector<float> x(kBatch * kSpec.input_dim - 1), y(kBatch, 0.0f);
  EXPECT_THAT(mlp->TrainStep(x, y, kBatch),
              StatusIs(absl::StatusCode::kInvalidArgument));
  x.resize(kBatch * kSpec.input_dim);
  y[2] = 2.0f;
  EXPECT_THAT(mlp->TrainStep(x, y, kBatch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("outside [0, 1]")));
  y[2] = std::nanf("");
  EXPECT_THAT(mlp->TrainStep(x, y, kBatch),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace embedps::dense
