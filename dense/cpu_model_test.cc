#include "dense/cpu_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "absl/base/casts.h"
#include "common/status_matchers.h"
#include "dense/blas.h"
#include "dense/internal/cpu_cross.h"
#include "dense/internal/cpu_layers.h"
#include "dense/internal/interaction_x86.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kBatch = 4;

// A small DLRM: 5 dense features, bottom 6-3, three slots of dim 3 (sum,
// mean, sum) with bags of 0..3 rows, top 5.
ModelSpec SmallDlrm() {
  ModelSpec spec;
  spec.num_dense = 5;
  spec.bottom = {6, 3};
  spec.embedding_dim = 3;
  spec.slots = {Pooling::kSum, Pooling::kMean, Pooling::kSum};
  spec.top = {5};
  spec.seed = 7;
  return spec;
}

template <typename T>
std::vector<T> Normal(size_t n, uint32_t seed, double scale = 1.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0, scale);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(normal(rng));
  return v;
}

// Owns the data a Batch<T> points into.
template <typename T>
struct BatchData {
  std::vector<T> dense, labels;
  std::vector<std::vector<T>> rows;
  std::vector<std::vector<int32_t>> offsets;
  std::vector<std::vector<T>> row_gradients;

  BatchData(const ModelSpec& spec, int batch, uint32_t seed) {
    dense = Normal<T>(static_cast<size_t>(batch) * spec.num_dense, seed);
    std::mt19937 rng(seed + 1);
    for (int b = 0; b < batch; ++b) labels.push_back(T(rng() % 2));
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      std::vector<int32_t> off = {0};
      // Bag sizes 0..3; bag 1 of slot 0 is always empty.
      for (int b = 0; b < batch; ++b) {
        const int size = (s == 0 && b == 1) ? 0 : static_cast<int>(rng() % 4);
        off.push_back(off.back() + size);
      }
      offsets.push_back(off);
      rows.push_back(
          Normal<T>(static_cast<size_t>(off.back()) * spec.embedding_dim,
                    seed + 10 + s, 0.5));
      row_gradients.emplace_back(rows.back().size());
    }
  }

  Batch<T> View(int batch) const {
    Batch<T> view;
    view.size = batch;
    view.dense = dense;
    view.labels = labels;
    for (size_t s = 0; s < rows.size(); ++s) {
      view.slots.push_back({rows[s], offsets[s]});
    }
    return view;
  }

  std::vector<absl::Span<T>> GradientSpans() {
    std::vector<absl::Span<T>> spans;
    for (auto& g : row_gradients) spans.push_back(absl::MakeSpan(g));
    return spans;
  }
};

// Worst relative error of `analytic` against central differences of
// `loss` over each value of `values` (perturbed in place).
double WorstRelativeError(std::vector<double>* values,
                          const std::vector<double>& analytic,
                          const std::function<double()>& loss) {
  constexpr double kH = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < values->size(); ++i) {
    const double saved = (*values)[i];
    (*values)[i] = saved + kH;
    const double up = loss();
    (*values)[i] = saved - kH;
    const double down = loss();
    (*values)[i] = saved;
    const double numeric = (up - down) / (2 * kH);
    worst = std::max(
        worst, std::abs(numeric - analytic[i]) /
                   std::max(1e-3, std::abs(numeric) + std::abs(analytic[i])));
  }
  return worst;
}

class GradientCheck : public ::testing::TestWithParam<ModelSpec> {};

// Central differences in float64 for every parameter, every dense input
// and every embedding row of every slot: covers every layer (bottom,
// pooling, interaction, top, loss) and the whole model.
TEST_P(GradientCheck, MatchesCentralDifferences) {
  const ModelSpec spec = GetParam();
  ASSERT_OK_AND_ASSIGN(auto model, CpuModel<double>::Create(spec));
  BatchData<double> data(spec, kBatch, 3);
  std::vector<double> dense_gradients(data.dense.size());
  auto spans = data.GradientSpans();
  ASSERT_OK(
      model
          ->TrainStep(data.View(kBatch), spans, absl::MakeSpan(dense_gradients))
          .status());
  const std::vector<double> parameter_gradients(model->gradients().begin(),
                                                model->gradients().end());
  const auto rows_gradients = data.row_gradients;
  const auto loss = [&]() {
    auto scratch = data.GradientSpans();
    return model->TrainStep(data.View(kBatch), scratch).value();
  };
  std::vector<double> parameters(model->parameters().begin(),
                                 model->parameters().end());
  // Perturb a copy and write it back before each evaluation.
  const auto parameter_loss = [&]() {
    std::copy(parameters.begin(), parameters.end(),
              model->parameters().begin());
    return loss();
  };
  EXPECT_LT(
      WorstRelativeError(&parameters, parameter_gradients, parameter_loss),
      1e-6)
      << "parameters";
  std::copy(parameters.begin(), parameters.end(), model->parameters().begin());
  EXPECT_LT(WorstRelativeError(&data.dense, dense_gradients, loss), 1e-6)
      << "dense inputs";
  for (size_t s = 0; s < spec.slots.size(); ++s) {
    EXPECT_LT(WorstRelativeError(&data.rows[s], rows_gradients[s], loss), 1e-6)
        << "rows of slot " << s;
  }
}

ModelSpec NoBottom() {
  ModelSpec spec = SmallDlrm();
  spec.bottom.clear();
  spec.embedding_dim = spec.num_dense;
  return spec;
}

// DCN-v2: the small DLRM's features through two cross layers; and cross
// layers over the dense features alone (no slots).
ModelSpec SmallDcn() {
  ModelSpec spec = SmallDlrm();
  spec.interaction = Interaction::kCross;
  spec.cross_layers = 2;
  return spec;
}

ModelSpec DenseOnlyDcn() {
  ModelSpec spec = MlpModelSpec(4, {3}, 5);
  spec.bottom = {5};
  spec.interaction = Interaction::kCross;
  spec.cross_layers = 3;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(Shapes, GradientCheck,
                         ::testing::Values(SmallDlrm(), NoBottom(),
                                           MlpModelSpec(6, {7, 4}, 11),
                                           MlpModelSpec(3, {}, 2), SmallDcn(),
                                           DenseOnlyDcn()));

// The cross network's forward pass against its definition, written out:
// x_{l+1}[o] = x0[o] · (Σ_i W_l[o][i] x_l[i] + b_l[o]) + x_l[o].
TEST(CrossTest, ForwardIsTheDefinition) {
  constexpr int kD = 3, kLayers = 2, kRows = 2;
  std::vector<LayerShape> layers;
  for (int l = 0; l < kLayers; ++l) {
    LayerShape layer;
    layer.in = layer.out = kD;
    layer.weight_offset = static_cast<size_t>(l) * (kD * kD + kD);
    layer.bias_offset = layer.weight_offset + kD * kD;
    layers.push_back(layer);
  }
  const std::vector<double> parameters =
      Normal<double>(kLayers * (kD * kD + kD), 4);
  const std::vector<double> x0 = Normal<double>(kRows * kD, 5);
  dense_internal::CrossStack<double> cross(layers);
  const double* out = cross.Forward(parameters.data(), x0.data(), kRows);
  for (int r = 0; r < kRows; ++r) {
    std::vector<double> x(x0.begin() + r * kD, x0.begin() + (r + 1) * kD);
    for (const LayerShape& layer : layers) {
      std::vector<double> next(kD);
      for (int o = 0; o < kD; ++o) {
        double u = parameters[layer.bias_offset + o];
        for (int i = 0; i < kD; ++i) {
          u += parameters[layer.weight_offset + o * kD + i] * x[i];
        }
        next[o] = x0[r * kD + o] * u + x[o];
      }
      x.swap(next);
    }
    for (int o = 0; o < kD; ++o) {
      EXPECT_NEAR(out[r * kD + o], x[o], 1e-12) << r << " " << o;
    }
  }
}

// Pointers to each sample's features of `values` (batch × F × dim,
// contiguous), as Interact takes them.
template <typename T>
std::vector<T*> FeaturePointers(std::vector<T>& values, int batch, int f,
                                int dim) {
  std::vector<T*> pointers(static_cast<size_t>(batch) * f);
  for (size_t i = 0; i < pointers.size(); ++i) {
    pointers[i] = values.data() + i * dim;
  }
  return pointers;
}

// The interaction alone, against a scalar loss Σ w ⊙ out.
TEST(InteractionTest, BackwardMatchesCentralDifferences) {
  constexpr int kFeatures = 4, kDim = 3;
  std::vector<double> features = Normal<double>(kBatch * kFeatures * kDim, 5);
  const std::vector<double*> x =
      FeaturePointers(features, kBatch, kFeatures, kDim);
  const int out_dim = kDim + kFeatures * (kFeatures - 1) / 2;
  const std::vector<double> weights = Normal<double>(kBatch * out_dim, 6);
  const auto loss = [&]() {
    std::vector<double> out(weights.size());
    dense_internal::Interact<double>(x.data(), kBatch, kFeatures, kDim,
                                     out.data());
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += weights[i] * out[i];
    return sum;
  };
  std::vector<double> analytic(features.size());
  dense_internal::InteractBackward<double>(
      x.data(), weights.data(), kBatch, kFeatures, kDim,
      FeaturePointers(analytic, kBatch, kFeatures, kDim).data());
  EXPECT_LT(WorstRelativeError(&features, analytic, loss), 1e-6);
}

// The kernels specialized for widths 16, 32, 64 and 128 (and any other
// width), with feature counts around their blocks, against the
// definition: out = [f_0, <f_i, f_j> for i < j], d f_i = [i = 0] d out_0 +
// Σ_{j != i} g_ij f_j.
TEST(InteractionTest, EveryWidthAndFeatureCountAgreesWithTheDefinition) {
  for (int dim : {16, 32, 64, 128, 3, 24}) {
    for (int f : {2, 5, 16, 17, 27, 33}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << ", F " << f);
      std::vector<double> features = Normal<double>(kBatch * f * dim, dim + f);
      const std::vector<double*> x = FeaturePointers(features, kBatch, f, dim);
      const int out_dim = dim + f * (f - 1) / 2;
      std::vector<double> out(kBatch * out_dim);
      dense_internal::Interact<double>(x.data(), kBatch, f, dim, out.data());
      const std::vector<double> dout = Normal<double>(out.size(), f);
      std::vector<double> dfeatures(features.size());
      dense_internal::InteractBackward<double>(
          x.data(), dout.data(), kBatch, f, dim,
          FeaturePointers(dfeatures, kBatch, f, dim).data());
      double worst_out = 0, worst_grad = 0;
      for (int b = 0; b < kBatch; ++b) {
        const double* xb = features.data() + b * f * dim;
        const double* o = out.data() + b * out_dim;
        const double* d = dout.data() + b * out_dim;
        std::vector<double> expected_grad(f * dim, 0);
        for (int k = 0; k < dim; ++k) {
          worst_out = std::max(worst_out, std::abs(o[k] - xb[k]));
          expected_grad[k] = d[k];
        }
        int p = dim;
        for (int i = 0; i < f; ++i) {
          for (int j = i + 1; j < f; ++j, ++p) {
            double dot = 0;
            for (int k = 0; k < dim; ++k) {
              dot += xb[i * dim + k] * xb[j * dim + k];
              expected_grad[i * dim + k] += d[p] * xb[j * dim + k];
              expected_grad[j * dim + k] += d[p] * xb[i * dim + k];
            }
            worst_out = std::max(worst_out, std::abs(o[p] - dot));
          }
        }
        for (int i = 0; i < f * dim; ++i) {
          worst_grad =
              std::max(worst_grad,
                       std::abs(dfeatures[b * f * dim + i] - expected_grad[i]));
        }
      }
      EXPECT_LT(worst_out, 1e-9);
      EXPECT_LT(worst_grad, 1e-9);
    }
  }
}

// The float kernels (the AVX2 ones where the build has them, for widths a
// multiple of 8) against the definition in float64: summed in another
// order and rounded to float at each step, so within float rounding.
TEST(InteractionTest, FloatAgreesWithTheDefinitionInFloat64) {
  for (int dim : {16, 32, 64, 128, 24, 8, 3}) {
    for (int f : {1, 2, 3, 5, 16, 17, 27, 33}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << ", F " << f);
      std::vector<float> features = Normal<float>(kBatch * f * dim, dim * f);
      const std::vector<float*> x = FeaturePointers(features, kBatch, f, dim);
      const int out_dim = dim + f * (f - 1) / 2;
      // Every output written: NaN where nothing is.
      std::vector<float> out(kBatch * out_dim, std::nanf(""));
      dense_internal::Interact<float>(x.data(), kBatch, f, dim, out.data());
      const std::vector<float> dout = Normal<float>(out.size(), f);
      std::vector<float> dfeatures(features.size(), std::nanf(""));
      dense_internal::InteractBackward<float>(
          x.data(), dout.data(), kBatch, f, dim,
          FeaturePointers(dfeatures, kBatch, f, dim).data());
      for (int b = 0; b < kBatch; ++b) {
        const float* xb = features.data() + b * f * dim;
        const float* o = out.data() + b * out_dim;
        const float* d = dout.data() + b * out_dim;
        // d f_i's definition in float64, and the sum of its terms' sizes.
        std::vector<double> grad(f * dim, 0), grad_scale(f * dim, 0);
        for (int k = 0; k < dim; ++k) {
          ASSERT_EQ(o[k], xb[k]) << k;
          grad[k] = d[k];
          grad_scale[k] = std::abs(d[k]);
        }
        int p = dim;
        for (int i = 0; i < f; ++i) {
          for (int j = i + 1; j < f; ++j, ++p) {
            double dot = 0, scale = 0;
            for (int k = 0; k < dim; ++k) {
              const double term =
                  static_cast<double>(xb[i * dim + k]) * xb[j * dim + k];
              dot += term;
              scale += std::abs(term);
              const double to_i = static_cast<double>(d[p]) * xb[j * dim + k];
              const double to_j = static_cast<double>(d[p]) * xb[i * dim + k];
              grad[i * dim + k] += to_i;
              grad_scale[i * dim + k] += std::abs(to_i);
              grad[j * dim + k] += to_j;
              grad_scale[j * dim + k] += std::abs(to_j);
            }
            ASSERT_NEAR(o[p], dot, 1e-6 * scale) << "pair " << i << ", " << j;
          }
        }
        for (int i = 0; i < f * dim; ++i) {
          ASSERT_NEAR(dfeatures[b * f * dim + i], grad[i], 1e-6 * grad_scale[i])
              << "feature " << i / dim << ", k " << i % dim;
        }
      }
    }
  }
}

// The AVX-512 backward runs where the machine has it, the AVX2 one
// elsewhere: a model's gradients must not depend on which ran.
TEST(InteractionTest, Avx512BackwardEqualsAvx2BitForBit) {
  if (!dense_internal::kHaveAvx2Interaction ||
      !dense_internal::HaveAvx512InteractionBackward()) {
    GTEST_SKIP() << "this build or machine has no AVX-512 interaction";
  }
  for (int dim : {16, 32, 48, 64, 128}) {
    for (int f : {1, 2, 3, 5, 16, 27, 33}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << ", F " << f);
      std::vector<float> features = Normal<float>(kBatch * f * dim, dim + f);
      const std::vector<float*> x = FeaturePointers(features, kBatch, f, dim);
      const int out_dim = dim + f * (f - 1) / 2;
      const std::vector<float> dout = Normal<float>(kBatch * out_dim, f);
      std::vector<float> avx2(features.size(), std::nanf(""));
      std::vector<float> avx512(features.size(), std::nanf(""));
      dense_internal::InteractBackwardAvx2(
          x.data(), dout.data(), kBatch, f, dim,
          FeaturePointers(avx2, kBatch, f, dim).data());
      dense_internal::InteractBackwardAvx512(
          x.data(), dout.data(), kBatch, f, dim,
          FeaturePointers(avx512, kBatch, f, dim).data());
      for (size_t i = 0; i < avx2.size(); ++i) {
        ASSERT_EQ(absl::bit_cast<uint32_t>(avx512[i]),
                  absl::bit_cast<uint32_t>(avx2[i]))
            << "feature " << i / dim % f << ", k " << i % dim;
      }
    }
  }
}

TEST(PoolingTest, OneRowBagsAreUsedInPlaceOthersPooled) {
  // One slot of dim 2; bags: empty, 3 rows, 1 row.
  const std::vector<double> rows = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> offsets = {0, 0, 3, 4};
  const std::vector<double> z0 = {-1, -2, -3, -4, -5, -6};  // 3 samples
  for (Pooling pooling : {Pooling::kSum, Pooling::kMean}) {
    const std::vector<Pooling> slots = {pooling};
    const std::vector<SlotBags<double>> bags = {{rows, offsets}};
    std::vector<double> pooled(3 * 2, -9);
    std::vector<const double*> x(3 * 2);
    dense_internal::GatherFeatures<double>(slots, bags, 0, 3, 2, z0.data(),
                                           pooled.data(), x.data());
    EXPECT_EQ(x[0], z0.data());
    EXPECT_EQ(x[2], z0.data() + 2);
    EXPECT_THAT(std::vector<double>(x[1], x[1] + 2),
                ::testing::ElementsAre(0, 0));
    if (pooling == Pooling::kSum) {
      EXPECT_THAT(std::vector<double>(x[3], x[3] + 2),
                  ::testing::ElementsAre(9, 12));
    } else {
      EXPECT_THAT(std::vector<double>(x[3], x[3] + 2),
                  ::testing::ElementsAre(3, 4));
    }
    EXPECT_EQ(x[5], rows.data() + 6);  // the one-row bag: no copy
    // From the third sample only (first = 2): its bag, in place.
    std::vector<const double*> last(2);
    dense_internal::GatherFeatures<double>(slots, bags, 2, 1, 2, z0.data() + 4,
                                           pooled.data(), last.data());
    EXPECT_EQ(last[1], rows.data() + 6);

    std::vector<double> row_gradients(rows.size(), -9), dz0(6, -9),
        dpooled(6, -9);
    std::vector<absl::Span<double>> gradient_spans = {
        absl::MakeSpan(row_gradients)};
    std::vector<double*> dx(3 * 2);
    dense_internal::FeatureGradientTargets<double>(
        bags, gradient_spans, 0, 3, 2, dz0.data(), dpooled.data(), dx.data());
    EXPECT_EQ(dx[0], dz0.data());
    EXPECT_EQ(dx[5], row_gradients.data() + 6);
    // The gradients a backward pass would write, then the pooled bags'.
    for (int b = 0; b < 3; ++b) {
      dx[b * 2 + 1][0] = 10.0 * (b + 1);
      dx[b * 2 + 1][1] = 20.0 * (b + 1);
    }
    dense_internal::UnpoolGradients<double>(slots, bags, gradient_spans, 0, 3,
                                            2, dpooled.data());
    const double share = pooling == Pooling::kMean ? 1.0 / 3 : 1.0;
    EXPECT_THAT(row_gradients, ::testing::ElementsAre(
                                   20 * share, 40 * share, 20 * share,
                                   40 * share, 20 * share, 40 * share, 30, 60));
  }
}

TEST(CpuModelTest, Float32AgreesWithFloat64) {
  const ModelSpec spec = SmallDlrm();
  ASSERT_OK_AND_ASSIGN(auto m32, CpuModel<float>::Create(spec));
  ASSERT_OK_AND_ASSIGN(auto m64, CpuModel<double>::Create(spec));
  // Same seed: the float model's parameters are the double's, rounded.
  for (size_t i = 0; i < m32->parameters().size(); ++i) {
    ASSERT_EQ(m32->parameters()[i], static_cast<float>(m64->parameters()[i]));
    m64->parameters()[i] = m32->parameters()[i];
  }
  BatchData<float> d32(spec, kBatch, 9);
  BatchData<double> d64(spec, kBatch, 9);
  // Same inputs: the float batch, widened.
  d64.dense.assign(d32.dense.begin(), d32.dense.end());
  for (size_t s = 0; s < spec.slots.size(); ++s) {
    d64.rows[s].assign(d32.rows[s].begin(), d32.rows[s].end());
  }
  auto g32 = d32.GradientSpans();
  auto g64 = d64.GradientSpans();
  ASSERT_OK_AND_ASSIGN(float loss32, m32->TrainStep(d32.View(kBatch), g32));
  ASSERT_OK_AND_ASSIGN(double loss64, m64->TrainStep(d64.View(kBatch), g64));
  EXPECT_NEAR(loss32, loss64, 1e-4 * std::abs(loss64));
  const auto relative = [](auto a, auto b) {
    double diff = 0, ref = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
      ref = std::max(ref, std::abs(static_cast<double>(b[i])));
    }
    return diff / ref;
  };
  EXPECT_LT(relative(m32->gradients(), m64->gradients()), 1e-4);
  for (size_t s = 0; s < spec.slots.size(); ++s) {
    EXPECT_LT(relative(d32.row_gradients[s], d64.row_gradients[s]), 1e-4);
  }
}

class ThreadSplit : public ::testing::TestWithParam<ModelSpec> {};

TEST_P(ThreadSplit, TheSameStepOnOneTwoOrThreeThreads) {
  // The batch is split into DenseThreads() parts, one per thread, with
  // single-threaded GEMMs: each sample's logit, row gradients and dense
  // input gradients come out of the same arithmetic whatever the split;
  // the weight gradients and the loss are sums over the batch, added part
  // by part.
  const ModelSpec spec = GetParam();
  constexpr int kSamples = 200;  // three parts of at least 64 samples
  std::vector<float> logits_of[4], gradients_of[4], rows_of[4], dense_of[4];
  float loss_of[4] = {};
  for (int threads : {1, 2, 3}) {
    SetDenseThreads(threads);
    ASSERT_OK_AND_ASSIGN(auto model, CpuModel<float>::Create(spec));
    BatchData<float> data(spec, kSamples, 9);
    auto row_gradients = data.GradientSpans();
    dense_of[threads].resize(data.dense.size());
    ASSERT_OK_AND_ASSIGN(loss_of[threads],
                         model->TrainStep(data.View(kSamples), row_gradients,
                                          absl::MakeSpan(dense_of[threads])));
    gradients_of[threads].assign(model->gradients().begin(),
                                 model->gradients().end());
    for (const auto& g : data.row_gradients) {
      rows_of[threads].insert(rows_of[threads].end(), g.begin(), g.end());
    }
    logits_of[threads].resize(kSamples);
    ASSERT_OK(model->Predict(data.View(kSamples),
                             absl::MakeSpan(logits_of[threads])));
  }
  SetDenseThreads(1);
  for (int threads : {2, 3}) {
    EXPECT_EQ(rows_of[threads], rows_of[1]) << threads << " threads";
    EXPECT_EQ(dense_of[threads], dense_of[1]) << threads << " threads";
    EXPECT_EQ(logits_of[threads], logits_of[1]) << threads << " threads";
    EXPECT_NEAR(loss_of[threads], loss_of[1], 1e-6f);
    ASSERT_EQ(gradients_of[threads].size(), gradients_of[1].size());
    for (size_t i = 0; i < gradients_of[1].size(); ++i) {
      ASSERT_NEAR(gradients_of[threads][i], gradients_of[1][i],
                  1e-5f + 1e-4f * std::abs(gradients_of[1][i]))
          << i;
    }
  }
  // The comparison is not vacuous: the step wrote gradients.
  EXPECT_TRUE(std::any_of(dense_of[1].begin(), dense_of[1].end(),
                          [](float g) { return g != 0; }));
}

INSTANTIATE_TEST_SUITE_P(Shapes, ThreadSplit,
                         ::testing::Values(SmallDlrm(), NoBottom(),
                                           MlpModelSpec(6, {7, 4}, 11),
                                           MlpModelSpec(3, {}, 2), SmallDcn(),
                                           DenseOnlyDcn()));

TEST(CpuModelTest, RowGradientsAreHandedOverBeforeTheWeightGradients) {
  // The callback sees the rows' final gradients while no weight gradient
  // has been computed yet (the buffer of a new model still all zeros),
  // and the step is the same as one without a callback.
  const ModelSpec spec = SmallDlrm();
  constexpr int kSamples = 200;
  for (int threads : {1, 2}) {
    SetDenseThreads(threads);
    ASSERT_OK_AND_ASSIGN(auto with, CpuModel<float>::Create(spec));
    ASSERT_OK_AND_ASSIGN(auto without, CpuModel<float>::Create(spec));
    BatchData<float> data(spec, kSamples, 5), plain(spec, kSamples, 5);
    int calls = 0;
    std::vector<std::vector<float>> rows_then;
    std::vector<float> gradients_then;
    ASSERT_OK_AND_ASSIGN(
        float loss, with->TrainStep(data.View(kSamples), data.GradientSpans(),
                                    /*dense_gradients=*/{}, [&] {
                                      ++calls;
                                      rows_then = data.row_gradients;
                                      gradients_then.assign(
                                          with->gradients().begin(),
                                          with->gradients().end());
                                    }));
    ASSERT_OK_AND_ASSIGN(
        float plain_loss,
        without->TrainStep(plain.View(kSamples), plain.GradientSpans()));
    EXPECT_EQ(calls, 1) << threads << " threads";
    EXPECT_EQ(rows_then, data.row_gradients) << threads << " threads";
    EXPECT_EQ(data.row_gradients, plain.row_gradients);
    EXPECT_EQ(loss, plain_loss);
    EXPECT_TRUE(std::equal(with->gradients().begin(), with->gradients().end(),
                           without->gradients().begin()));
    EXPECT_TRUE(std::all_of(gradients_then.begin(), gradients_then.end(),
                            [](float g) { return g == 0; }))
        << threads << " threads";
    EXPECT_TRUE(std::any_of(with->gradients().begin(), with->gradients().end(),
                            [](float g) { return g != 0; }));
  }
  SetDenseThreads(1);
}

TEST(CpuModelTest, SameSeedSameParametersAndTrainingReducesLoss) {
  const ModelSpec spec = SmallDlrm();
  ASSERT_OK_AND_ASSIGN(auto a, CpuModel<float>::Create(spec));
  ASSERT_OK_AND_ASSIGN(auto b, CpuModel<float>::Create(spec));
  EXPECT_TRUE(std::equal(a->parameters().begin(), a->parameters().end(),
                         b->parameters().begin()));
  ModelSpec other = spec;
  other.seed = spec.seed + 1;
  ASSERT_OK_AND_ASSIGN(auto c, CpuModel<float>::Create(other));
  EXPECT_FALSE(std::equal(a->parameters().begin(), a->parameters().end(),
                          c->parameters().begin()));

  BatchData<float> data(spec, kBatch, 4);
  auto spans = data.GradientSpans();
  ASSERT_OK_AND_ASSIGN(float first, a->TrainStep(data.View(kBatch), spans));
  float last = first;
  for (int step = 0; step < 300; ++step) {
    ASSERT_OK_AND_ASSIGN(last, a->TrainStep(data.View(kBatch), spans));
    for (size_t i = 0; i < a->parameters().size(); ++i) {
      a->parameters()[i] -= 0.1f * a->gradients()[i];
    }
    // The embedding rows learn too, as a server would apply them.
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      for (size_t i = 0; i < data.rows[s].size(); ++i) {
        data.rows[s][i] -= 0.1f * data.row_gradients[s][i];
      }
    }
  }
  EXPECT_LT(last, 0.2f * first);
}

TEST(CpuModelTest, BadSpecIsRefused) {
  ModelSpec spec = SmallDlrm();
  spec.num_dense = 0;
  EXPECT_THAT(
      CpuModel<float>::Create(spec),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_dense")));
  spec = SmallDlrm();
  spec.top = {4, -1};
  EXPECT_THAT(
      CpuModel<float>::Create(spec),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top[1]")));
  spec = SmallDlrm();
  spec.embedding_dim = 4;
  EXPECT_THAT(
      CpuModel<float>::Create(spec),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("embedding_dim")));
  for (int layers : {0, -1, kMaxCrossLayers + 1}) {
    spec = SmallDcn();
    spec.cross_layers = layers;
    EXPECT_THAT(CpuModel<float>::Create(spec),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("cross_layers")));
  }
  spec = SmallDlrm();
  spec.cross_layers = 2;  // without the cross interaction
  EXPECT_THAT(
      CpuModel<float>::Create(spec),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cross_layers")));
}

TEST(CpuModelTest, BadBatchIsRefusedAndChangesNothing) {
  const ModelSpec spec = SmallDlrm();
  ASSERT_OK_AND_ASSIGN(auto model, CpuModel<float>::Create(spec));
  const std::vector<float> before(model->parameters().begin(),
                                  model->parameters().end());
  const auto refused = [&](BatchData<float> data, const std::string& what) {
    auto spans = data.GradientSpans();
    EXPECT_THAT(model->TrainStep(data.View(kBatch), spans),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  BatchData<float> good(spec, kBatch, 1);
  {
    BatchData<float> d = good;
    d.dense.pop_back();
    refused(d, "dense features");
  }
  {
    BatchData<float> d = good;
    d.labels[2] = 2.0f;
    refused(d, "outside [0, 1]");
    d.labels[2] = std::nanf("");
    refused(d, "outside [0, 1]");
  }
  {
    BatchData<float> d = good;
    d.offsets[1][1] = d.offsets[1][2] + 1;
    refused(d, "offsets decrease");
  }
  {
    BatchData<float> d = good;
    d.offsets[2][0] = 1;
    refused(d, "starting at 0");
  }
  {
    BatchData<float> d = good;
    d.rows[0].push_back(1.0f);
    refused(d, "rows of dim");
  }
  {
    BatchData<float> d = good;
    d.row_gradients[1].push_back(0.0f);
    refused(d, "row-gradient");
  }
  {
    auto spans = good.GradientSpans();
    Batch<float> view = good.View(kBatch);
    view.slots.pop_back();
    EXPECT_THAT(model->TrainStep(view, spans),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("sparse slots")));
    view = good.View(0);
    EXPECT_THAT(
        model->TrainStep(view, spans),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch size")));
  }
  EXPECT_TRUE(
      std::equal(before.begin(), before.end(), model->parameters().begin()));
}

}  // namespace
}  // namespace embedps::dense
