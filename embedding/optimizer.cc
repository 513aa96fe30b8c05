#include "embedding/optimizer.h"

#include <cmath>
#include <cstring>

namespace embedps::embedding {
namespace {

// The loops below are written so that GCC vectorises them at -O3
// (restrict pointers, no calls but sqrt, which -fno-math-errno inlines).

class Sgd final : public RowOptimizer {
 public:
  Sgd(const OptimizerSpec& spec, int32_t dim)
      : lr_(spec.learning_rate), dim_(dim) {}
  int32_t state_floats() const override { return 0; }
  void InitState(float*) const override {}
  void Apply(float* __restrict w, float* __restrict,
             const float* __restrict g) const override {
    const float lr = lr_;
    for (int32_t i = 0; i < dim_; ++i) w[i] -= lr * g[i];
  }

 private:
  const float lr_;
  const int32_t dim_;
};

class Adagrad final : public RowOptimizer {
 public:
  Adagrad(const OptimizerSpec& spec, int32_t dim)
      : lr_(spec.learning_rate),
        eps_(spec.epsilon),
        initial_(spec.initial_accumulator),
        dim_(dim) {}
  int32_t state_floats() const override { return dim_; }
  void InitState(float* state) const override {
    for (int32_t i = 0; i < dim_; ++i) state[i] = initial_;
  }
  void Apply(float* __restrict w, float* __restrict acc,
             const float* __restrict g) const override {
    const float lr = lr_;
    const float eps = eps_;
    for (int32_t i = 0; i < dim_; ++i) {
      acc[i] += g[i] * g[i];
      w[i] -= lr * g[i] / (std::sqrt(acc[i]) + eps);
    }
  }

 private:
  const float lr_, eps_, initial_;
  const int32_t dim_;
};

class RowWiseAdagrad final : public RowOptimizer {
 public:
  RowWiseAdagrad(const OptimizerSpec& spec, int32_t dim)
      : lr_(spec.learning_rate),
        eps_(spec.epsilon),
        initial_(spec.initial_accumulator),
        dim_(dim) {}
  int32_t state_floats() const override { return 1; }
  void InitState(float* state) const override { state[0] = initial_; }
  void Apply(float* __restrict w, float* __restrict acc,
             const float* __restrict g) const override {
    float sum_sq = 0.0f;
    for (int32_t i = 0; i < dim_; ++i) sum_sq += g[i] * g[i];
    acc[0] += sum_sq / static_cast<float>(dim_);
    const float step = lr_ / (std::sqrt(acc[0]) + eps_);
    for (int32_t i = 0; i < dim_; ++i) w[i] -= step * g[i];
  }

 private:
  const float lr_, eps_, initial_;
  const int32_t dim_;
};

// State: m[dim], v[dim], then the row's update count t as uint32 bits.
class Adam final : public RowOptimizer {
 public:
  Adam(const OptimizerSpec& spec, int32_t dim)
      : lr_(spec.learning_rate),
        eps_(spec.epsilon),
        beta1_(spec.beta1),
        beta2_(spec.beta2),
        dim_(dim) {}
  int32_t state_floats() const override { return 2 * dim_ + 1; }
  void InitState(float* state) const override {
    std::memset(state, 0, sizeof(float) * state_floats());
  }
  void Apply(float* __restrict w, float* __restrict state,
             const float* __restrict g) const override {
    float* __restrict m = state;
    float* __restrict v = state + dim_;
    uint32_t t;
    std::memcpy(&t, state + 2 * dim_, sizeof(t));
    if (t < UINT32_MAX) ++t;
    std::memcpy(state + 2 * dim_, &t, sizeof(t));
    const float bias1 = static_cast<float>(1.0 - std::pow(double{beta1_}, t));
    const float bias2 = static_cast<float>(1.0 - std::pow(double{beta2_}, t));
    const float b1 = beta1_, b2 = beta2_, lr = lr_, eps = eps_;
    for (int32_t i = 0; i < dim_; ++i) {
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * (g[i] * g[i]);
      const float m_hat = m[i] / bias1;
      const float v_hat = v[i] / bias2;
      w[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }

 private:
  const float lr_, eps_, beta1_, beta2_;
  const int32_t dim_;
};

// State: z[dim], n[dim].
class Ftrl final : public RowOptimizer {
 public:
  Ftrl(const OptimizerSpec& spec, int32_t dim)
      : alpha_(spec.ftrl_alpha),
        beta_(spec.ftrl_beta),
        l1_(spec.ftrl_l1),
        l2_(spec.ftrl_l2),
        initial_(spec.initial_accumulator),
        dim_(dim) {}
  int32_t state_floats() const override { return 2 * dim_; }
  void InitState(float* state) const override {
    for (int32_t i = 0; i < dim_; ++i) state[i] = 0.0f;
    for (int32_t i = 0; i < dim_; ++i) state[dim_ + i] = initial_;
  }
  void Apply(float* __restrict w, float* __restrict state,
             const float* __restrict g) const override {
    float* __restrict z = state;
    float* __restrict n = state + dim_;
    const float alpha = alpha_, beta = beta_, l1 = l1_, l2 = l2_;
    for (int32_t i = 0; i < dim_; ++i) {
      const float n_new = n[i] + g[i] * g[i];
      const float sqrt_n_new = std::sqrt(n_new);
      const float sigma = (sqrt_n_new - std::sqrt(n[i])) / alpha;
      z[i] += g[i] - sigma * w[i];
      n[i] = n_new;
      const float shrunk = z[i] - std::copysign(l1, z[i]);
      const float updated = -shrunk / ((beta + sqrt_n_new) / alpha + l2);
      w[i] = std::abs(z[i]) <= l1 ? 0.0f : updated;
    }
  }

 private:
  const float alpha_, beta_, l1_, l2_, initial_;
  const int32_t dim_;
};

}  // namespace

std::unique_ptr<RowOptimizer> RowOptimizer::Create(const OptimizerSpec& spec,
                                                   int32_t dim) {
  switch (spec.kind) {
    case OptimizerSpec::Kind::kSgd:
      return std::make_unique<Sgd>(spec, dim);
    case OptimizerSpec::Kind::kAdagrad:
      return std::make_unique<Adagrad>(spec, dim);
    case OptimizerSpec::Kind::kRowWiseAdagrad:
      return std::make_unique<RowWiseAdagrad>(spec, dim);
    case OptimizerSpec::Kind::kAdam:
      return std::make_unique<Adam>(spec, dim);
    case OptimizerSpec::Kind::kFtrl:
      return std::make_unique<Ftrl>(spec, dim);
  }
  return nullptr;
}

}  // namespace embedps::embedding
