#include "dense/dense_optimizer.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace embedps::dense {
namespace {

constexpr double kPi = 3.14159265358979323846;

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("dense optimizer field '", field, "' ", why));
}

absl::Status Validate(const DenseOptimizerSpec& s) {
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

class Optimizer final : public DenseOptimizer {
 public:
  Optimizer(const DenseOptimizerSpec& spec, size_t n)
      : spec_(spec),
        n_(n),
        first_(spec.kind == DenseOptimizerSpec::Kind::kSgd && spec.momentum == 0
                   ? 0
                   : n,
               0.0f),
        second_(spec.kind == DenseOptimizerSpec::Kind::kSgd ? 0 : n, 0.0f) {}

  double LearningRate(int64_t step) const override {
    const double peak = spec_.learning_rate;
    if (step < spec_.warmup_steps) {
      return peak * static_cast<double>(step + 1) /
             static_cast<double>(spec_.warmup_steps);
    }
    if (spec_.decay == DenseOptimizerSpec::Decay::kConstant) return peak;
    const double span =
        static_cast<double>(spec_.total_steps - spec_.warmup_steps);
    const double progress =
        std::min(1.0, static_cast<double>(step - spec_.warmup_steps) / span);
    const double floor = spec_.min_learning_rate;
    if (spec_.decay == DenseOptimizerSpec::Decay::kLinear) {
      return peak + (floor - peak) * progress;
    }
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(kPi * progress));
  }

  absl::Status Step(absl::Span<float> p, absl::Span<const float> g) override {
    if (p.size() != n_ || g.size() != n_) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense optimizer holds ", n_, " parameters; got ",
                       p.size(), " parameters and ", g.size(), " gradients"));
    }
    const float lr = static_cast<float>(LearningRate(step_));
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
    switch (spec_.kind) {
      case DenseOptimizerSpec::Kind::kSgd:
        if (first_.empty()) {
          for (size_t i = 0; i < n_; ++i) params[i] -= lr * grads[i];
        } else {
          const float mu = static_cast<float>(spec_.momentum);
          for (size_t i = 0; i < n_; ++i) {
            first[i] = mu * first[i] + grads[i];
            params[i] -= lr * first[i];
          }
        }
        return absl::OkStatus();
      case DenseOptimizerSpec::Kind::kAdamW:
      case DenseOptimizerSpec::Kind::kAdam: {
        if (spec_.kind == DenseOptimizerSpec::Kind::kAdamW) {
          const float decay = lr * static_cast<float>(spec_.weight_decay);
          for (size_t i = 0; i < n_; ++i) params[i] -= decay * params[i];
        }
        const float b1 = static_cast<float>(spec_.beta1);
        const float b2 = static_cast<float>(spec_.beta2);
        const float eps = static_cast<float>(spec_.epsilon);
        const float bias1 =
            static_cast<float>(1.0 - std::pow(spec_.beta1, step_));
        const float bias2 =
            static_cast<float>(1.0 - std::pow(spec_.beta2, step_));
        for (size_t i = 0; i < n_; ++i) {
          first[i] = b1 * first[i] + (1.0f - b1) * grads[i];
          second[i] = b2 * second[i] + (1.0f - b2) * (grads[i] * grads[i]);
          params[i] -=
              lr * (first[i] / bias1) / (std::sqrt(second[i] / bias2) + eps);
        }
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown dense optimizer kind");
  }

  int64_t steps() const override { return step_; }

  // Layout: step (int64), first moments, second moments (float32 each;
  // either may be empty for the kind).
  std::string SaveState() const override {
    std::string state(sizeof(int64_t), '\0');
    std::memcpy(state.data(), &step_, sizeof(int64_t));
    for (const std::vector<float>* moments : {&first_, &second_}) {
      if (moments->empty()) continue;
      state.append(reinterpret_cast<const char*>(moments->data()),
                   moments->size() * sizeof(float));
    }
    return state;
  }

  absl::Status RestoreState(absl::string_view state) override {
    const size_t want =
        sizeof(int64_t) + (first_.size() + second_.size()) * sizeof(float);
    if (state.size() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dense optimizer state has ", state.size(), " bytes; this ",
          "optimizer (its kind and ", n_, " parameters) needs ", want));
    }
    std::memcpy(&step_, state.data(), sizeof(int64_t));
    const char* at = state.data() + sizeof(int64_t);
    for (std::vector<float>* moments : {&first_, &second_}) {
      if (moments->empty()) continue;
      std::memcpy(moments->data(), at, moments->size() * sizeof(float));
      at += moments->size() * sizeof(float);
    }
    return absl::OkStatus();
  }

 private:
  const DenseOptimizerSpec spec_;
  const size_t n_;
  std::vector<float> first_, second_;
  int64_t step_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DenseOptimizer>> DenseOptimizer::Create(
    const DenseOptimizerSpec& spec, size_t num_parameters) {
  if (absl::Status s = Validate(spec); !s.ok()) return s;
  return std::unique_ptr<DenseOptimizer>(new Optimizer(spec, num_parameters));
}

}  // namespace embedps::dense
