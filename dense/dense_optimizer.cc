#include "dense/dense_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace embedps::dense {
namespace {

constexpr double kPi = 3.14159265358979323846;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("dense optimizer field '", field, "' ", why));
}

class Optimizer final : public DenseOptimizer {
 public:
  Optimizer(const DenseOptimizerSpec& spec, size_t n)
      : spec_(spec),
        n_(n),
        first_(FirstMomentsOf(spec, n), 0.0f),
        second_(SecondMomentsOf(spec, n), 0.0f) {}

  double LearningRate(int64_t step) const override {
    return DenseLearningRate(spec_, step);
  }

  absl::Status Step(absl::Span<float> p, absl::Span<const float> g) override {
    if (p.size() != n_ || g.size() != n_) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense optimizer holds ", n_, " parameters; got ",
                       p.size(), " parameters and ", g.size(), " gradients"));
    }
    const DenseStepRule rule = DenseStepRuleOf(spec_, step_);
    ++step_;
    // The loops run over restrict-qualified raw pointers: through the
    // vectors' and spans' accessors GCC reloads the data pointers at every
    // element (a store may change them, as far as it knows) and keeps the
    // loops scalar — Adam's divisions and square root then took 12% of a
    // training job's cycles.
    float* __restrict params = p.data();
    const float* __restrict grads = g.data();
    float* __restrict first = first_.data();
    float* __restrict second = second_.data();
    switch (rule.kind) {
      case DenseStepRule::Kind::kSgd:
        for (size_t i = 0; i < n_; ++i) SgdUpdate(rule, params[i], grads[i]);
        break;
      case DenseStepRule::Kind::kSgdMomentum:
        for (size_t i = 0; i < n_; ++i) {
          SgdMomentumUpdate(rule, params[i], grads[i], first[i]);
        }
        break;
      case DenseStepRule::Kind::kAdam:
        for (size_t i = 0; i < n_; ++i) {
          AdamUpdate(rule, params[i], grads[i], first[i], second[i]);
        }
        break;
      case DenseStepRule::Kind::kAdamW:
        for (size_t i = 0; i < n_; ++i) {
          AdamWUpdate(rule, params[i], grads[i], first[i], second[i]);
        }
        break;
    }
    return absl::OkStatus();
  }

  int64_t steps() const override { return step_; }

  absl::StatusOr<std::string> SaveState() const override {
    return EncodeDenseOptimizerState(step_, first_, second_);
  }

  absl::Status RestoreState(absl::string_view state) override {
    return DecodeDenseOptimizerState(state, n_, &step_, absl::MakeSpan(first_),
                                     absl::MakeSpan(second_));
  }

 private:
  const DenseOptimizerSpec spec_;
  const size_t n_;
  std::vector<float> first_, second_;
  int64_t step_ = 0;
};

}  // namespace

absl::Status ValidateDenseOptimizerSpec(const DenseOptimizerSpec& s) {
  if (!(s.learning_rate > 0) || !std::isfinite(s.learning_rate)) {
    return Invalid("learning_rate", "must be finite and > 0");
  }
  if (!(s.momentum >= 0 && s.momentum < 1))
    return Invalid("momentum", "must be in [0, 1)");
  if (!(s.beta1 >= 0 && s.beta1 < 1))
    return Invalid("beta1", "must be in [0, 1)");
  if (!(s.beta2 >= 0 && s.beta2 < 1))
    return Invalid("beta2", "must be in [0, 1)");
  if (!(s.epsilon > 0)) return Invalid("epsilon", "must be > 0");
  if (!(s.weight_decay >= 0)) return Invalid("weight_decay", "must be >= 0");
  if (s.warmup_steps < 0) return Invalid("warmup_steps", "must be >= 0");
  if (!(s.min_learning_rate >= 0 && s.min_learning_rate <= s.learning_rate)) {
    return Invalid("min_learning_rate", "must be in [0, learning_rate]");
  }
  if (s.decay != DenseOptimizerSpec::Decay::kConstant &&
      s.total_steps <= s.warmup_steps) {
    return Invalid("total_steps",
                   "must exceed warmup_steps for a decaying schedule");
  }
  return absl::OkStatus();
}

double DenseLearningRate(const DenseOptimizerSpec& spec, int64_t step) {
  const double peak = spec.learning_rate;
  if (step < spec.warmup_steps) {
    return peak * static_cast<double>(step + 1) /
           static_cast<double>(spec.warmup_steps);
  }
  if (spec.decay == DenseOptimizerSpec::Decay::kConstant) return peak;
  const double span = static_cast<double>(spec.total_steps - spec.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - spec.warmup_steps) / span);
  const double floor = spec.min_learning_rate;
  if (spec.decay == DenseOptimizerSpec::Decay::kLinear) {
    return peak + (floor - peak) * progress;
  }
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(kPi * progress));
}

DenseStepRule DenseStepRuleOf(const DenseOptimizerSpec& spec, int64_t step) {
  DenseStepRule rule;
  rule.learning_rate = static_cast<float>(DenseLearningRate(spec, step));
  switch (spec.kind) {
    case DenseOptimizerSpec::Kind::kSgd:
      if (spec.momentum == 0) {
        rule.kind = DenseStepRule::Kind::kSgd;
      } else {
        rule.kind = DenseStepRule::Kind::kSgdMomentum;
        rule.momentum = static_cast<float>(spec.momentum);
      }
      return rule;
    case DenseOptimizerSpec::Kind::kAdam:
    case DenseOptimizerSpec::Kind::kAdamW:
      break;
  }
  const int64_t t = step + 1;  // Adam's bias corrections count from 1
  rule.kind = spec.kind == DenseOptimizerSpec::Kind::kAdamW
                  ? DenseStepRule::Kind::kAdamW
                  : DenseStepRule::Kind::kAdam;
  rule.beta1 = static_cast<float>(spec.beta1);
  rule.beta2 = static_cast<float>(spec.beta2);
  rule.epsilon = static_cast<float>(spec.epsilon);
  rule.bias1 =
      static_cast<float>(1.0 - std::pow(spec.beta1, static_cast<double>(t)));
  rule.bias2 =
      static_cast<float>(1.0 - std::pow(spec.beta2, static_cast<double>(t)));
  if (rule.kind == DenseStepRule::Kind::kAdamW) {
    rule.decay = rule.learning_rate * static_cast<float>(spec.weight_decay);
  }
  return rule;
}

size_t FirstMomentsOf(const DenseOptimizerSpec& spec, size_t num_parameters) {
  return spec.kind == DenseOptimizerSpec::Kind::kSgd && spec.momentum == 0
             ? 0
             : num_parameters;
}

size_t SecondMomentsOf(const DenseOptimizerSpec& spec, size_t num_parameters) {
  return spec.kind == DenseOptimizerSpec::Kind::kSgd ? 0 : num_parameters;
}

std::string EncodeDenseOptimizerState(int64_t steps,
                                      absl::Span<const float> first,
                                      absl::Span<const float> second) {
  std::string state(sizeof(int64_t), '\0');
  std::memcpy(state.data(), &steps, sizeof(int64_t));
  for (absl::Span<const float> moments : {first, second}) {
    state.append(reinterpret_cast<const char*>(moments.data()),
                 moments.size() * sizeof(float));
  }
  return state;
}

absl::Status DecodeDenseOptimizerState(absl::string_view state,
                                       size_t num_parameters, int64_t* steps,
                                       absl::Span<float> first,
                                       absl::Span<float> second) {
  const size_t want =
      sizeof(int64_t) + (first.size() + second.size()) * sizeof(float);
  if (state.size() != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense optimizer state has ", state.size(),
                     " bytes; this ", "optimizer (its kind and ",
                     num_parameters, " parameters) needs ", want));
  }
  std::memcpy(steps, state.data(), sizeof(int64_t));
  const char* at = state.data() + sizeof(int64_t);
  for (absl::Span<float> moments : {first, second}) {
    if (moments.empty()) continue;
    std::memcpy(moments.data(), at, moments.size() * sizeof(float));
    at += moments.size() * sizeof(float);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DenseOptimizer>> DenseOptimizer::Create(
    const DenseOptimizerSpec& spec, size_t num_parameters) {
  RETURN_IF_ERROR(ValidateDenseOptimizerSpec(spec));
  return std::unique_ptr<DenseOptimizer>(new Optimizer(spec, num_parameters));
}

}  // namespace embedps::dense
