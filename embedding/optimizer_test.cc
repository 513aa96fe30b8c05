// Each optimizer, run through a Table for 200 random steps, against a
// float64 implementation of its textbook formula.
#include "embedding/optimizer.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "embedding/table.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

constexpr int kDim = 16;
constexpr int kSteps = 200;
constexpr double kMaxRelativeError = 1e-5;

// float64 reference state of one row.
struct Reference {
  std::vector<double> w, a, m, v, z, n;
  double row_acc = 0;
  uint64_t t = 0;
};

void ReferenceStep(const OptimizerSpec& o, Reference& r,
                   const std::vector<float>& g32) {
  const double lr = o.learning_rate, eps = o.epsilon;
  std::vector<double> g(g32.begin(), g32.end());
  switch (o.kind) {
    case OptimizerSpec::Kind::kSgd:
      for (int i = 0; i < kDim; ++i) r.w[i] -= lr * g[i];
      break;
    case OptimizerSpec::Kind::kAdagrad:
      for (int i = 0; i < kDim; ++i) {
        r.a[i] += g[i] * g[i];
        r.w[i] -= lr * g[i] / (std::sqrt(r.a[i]) + eps);
      }
      break;
    case OptimizerSpec::Kind::kRowWiseAdagrad: {
      double mean_sq = 0;
      for (int i = 0; i < kDim; ++i) mean_sq += g[i] * g[i];
      r.row_acc += mean_sq / kDim;
      for (int i = 0; i < kDim; ++i) {
        r.w[i] -= lr * g[i] / (std::sqrt(r.row_acc) + eps);
      }
      break;
    }
    case OptimizerSpec::Kind::kAdam: {
      const double b1 = o.beta1, b2 = o.beta2;
      ++r.t;
      for (int i = 0; i < kDim; ++i) {
        r.m[i] = b1 * r.m[i] + (1 - b1) * g[i];
        r.v[i] = b2 * r.v[i] + (1 - b2) * g[i] * g[i];
        const double m_hat = r.m[i] / (1 - std::pow(b1, r.t));
        const double v_hat = r.v[i] / (1 - std::pow(b2, r.t));
        r.w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
      }
      break;
    }
    case OptimizerSpec::Kind::kFtrl: {
      const double alpha = o.ftrl_alpha, beta = o.ftrl_beta, l1 = o.ftrl_l1,
                   l2 = o.ftrl_l2;
      for (int i = 0; i < kDim; ++i) {
        const double n_new = r.n[i] + g[i] * g[i];
        const double sigma = (std::sqrt(n_new) - std::sqrt(r.n[i])) / alpha;
        r.z[i] += g[i] - sigma * r.w[i];
        r.n[i] = n_new;
        if (std::abs(r.z[i]) <= l1) {
          r.w[i] = 0;
        } else {
          const double sign = r.z[i] < 0 ? -1.0 : 1.0;
          r.w[i] =
              -(r.z[i] - sign * l1) / ((beta + std::sqrt(r.n[i])) / alpha + l2);
        }
      }
      break;
    }
  }
}

struct Case {
  std::string name;
  OptimizerSpec optimizer;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  OptimizerSpec o;
  o.kind = OptimizerSpec::Kind::kSgd;
  o.learning_rate = 0.05f;
  cases.push_back({"sgd", o});
  o = {};
  o.kind = OptimizerSpec::Kind::kAdagrad;
  o.learning_rate = 0.1f;
  // Hyper-parameters large enough that every term of the formula moves the
  // result well beyond the tolerance (a tiny epsilon would hide where it
  // sits in the formula).
  o.initial_accumulator = 0.1f;
  o.epsilon = 0.1f;
  cases.push_back({"adagrad", o});
  o.kind = OptimizerSpec::Kind::kRowWiseAdagrad;
  cases.push_back({"rowwise_adagrad", o});
  o = {};
  o.kind = OptimizerSpec::Kind::kAdam;
  o.learning_rate = 0.01f;
  o.beta1 = 0.9f;
  o.beta2 = 0.99f;
  o.epsilon = 0.01f;
  cases.push_back({"adam", o});
  o = {};
  o.kind = OptimizerSpec::Kind::kFtrl;
  o.ftrl_alpha = 0.1f;
  o.ftrl_beta = 1.0f;
  o.ftrl_l1 = 0.001f;
  o.ftrl_l2 = 0.01f;
  o.initial_accumulator = 0.1f;
  cases.push_back({"ftrl", o});
  o.ftrl_l1 = 0.5f;  // strong L1: many weights exactly zero
  cases.push_back({"ftrl_sparse", o});
  return cases;
}

class OptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerTest, MatchesFloat64ReferenceOver200Steps) {
  const Case& c = GetParam();
  TableSpec spec;
  spec.name = "t";
  spec.dim = kDim;
  spec.seed = 11;
  spec.initializer.kind = InitializerSpec::Kind::kNormal;
  spec.initializer.stddev = 0.5f;
  spec.optimizer = c.optimizer;
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));

  const std::vector<uint64_t> keys = {3, 1000000007, 0xFFFFFFFFFFFFFFFFull};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));

  const double init_acc = c.optimizer.initial_accumulator;
  std::vector<Reference> refs(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    Reference& r = refs[k];
    r.w.assign(values.begin() + k * kDim, values.begin() + (k + 1) * kDim);
    r.a.assign(kDim, init_acc);
    r.row_acc = init_acc;
    r.m.assign(kDim, 0);
    r.v.assign(kDim, 0);
    r.z.assign(kDim, 0);
    r.n.assign(kDim, init_acc);
  }

  std::mt19937 rng(1234);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> grads(keys.size() * kDim);
  for (int step = 0; step < kSteps; ++step) {
    for (float& g : grads) g = normal(rng);
    ASSERT_OK(table->Push(keys, grads));
    for (size_t k = 0; k < keys.size(); ++k) {
      ReferenceStep(c.optimizer, refs[k],
                    std::vector<float>(grads.begin() + k * kDim,
                                       grads.begin() + (k + 1) * kDim));
    }
  }

  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  for (size_t k = 0; k < keys.size(); ++k) {
    double max_diff = 0, max_ref = 0;
    for (int i = 0; i < kDim; ++i) {
      max_diff =
          std::max(max_diff, std::abs(values[k * kDim + i] - refs[k].w[i]));
      max_ref = std::max(max_ref, std::abs(refs[k].w[i]));
    }
    const double relative = max_ref == 0 ? max_diff : max_diff / max_ref;
    EXPECT_LT(relative, kMaxRelativeError)
        << c.name << " key " << keys[k] << " max |w32 - w64| " << max_diff
        << " max |w64| " << max_ref;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, OptimizerTest,
                         ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(RowOptimizerTest, StateSizesMatchTheSpec) {
  for (const Case& c : Cases()) {
    auto opt = RowOptimizer::Create(c.optimizer, 24);
    EXPECT_EQ(opt->state_floats(), OptimizerStateFloats(c.optimizer, 24))
        << c.name;
  }
}

}  // namespace
}  // namespace embedps::embedding
