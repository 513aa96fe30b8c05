// Optimizers for the dense parameters on the worker, applied after the
// gradient allreduce, over one flat parameter buffer:
//   SGD      v = μ·v + g;  p -= lr·v            (μ = 0: plain SGD)
//   Adam     m = β1·m + (1-β1)·g; v = β2·v + (1-β2)·g²;
//            p -= lr·(m/(1-β1ᵗ)) / (√(v/(1-β2ᵗ)) + ε)
//   AdamW    Adam, plus decoupled weight decay: p -= lr·λ·p (before the
//            Adam step, as in Loshchilov & Hutter)
// The learning rate follows a schedule: linear warm-up from 0 over
// `warmup_steps`, then constant, linear or cosine decay to `min_lr` at
// `total_steps`. The elementwise arithmetic is dense_update.h's, which the
// host's loops here and the CUDA backend's kernel (dense/cuda/
// cuda_dense_optimizer.h, made by Model::NewOptimizer) share; both save
// the same state bytes, so a checkpoint moves between backends.
//
// Thread safety: one thread at a time.
#ifndef EMBEDPS_DENSE_DENSE_OPTIMIZER_H_
#define EMBEDPS_DENSE_DENSE_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dense/dense_update.h"

namespace embedps::dense {

struct DenseOptimizerSpec {
  enum class Kind { kSgd, kAdam, kAdamW };
  enum class Decay { kConstant, kLinear, kCosine };
  // Default: kAdam.
  Kind kind = Kind::kAdam;
  // Peak learning rate. Default: 1e-3.
  double learning_rate = 1e-3;
  // SGD momentum μ in [0, 1). Default: 0.
  double momentum = 0.0;
  // Adam/AdamW. Defaults: 0.9, 0.999, 1e-8.
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  // AdamW decoupled weight decay λ >= 0. Default: 0.01.
  double weight_decay = 0.01;
  // Schedule. Defaults: no warm-up, constant.
  int64_t warmup_steps = 0;
  Decay decay = Decay::kConstant;
  // kLinear/kCosine: the step at which the rate reaches min_lr. Default: 0.
  int64_t total_steps = 0;
  double min_learning_rate = 0.0;
};

// INVALID_ARGUMENT naming the field for a bad spec.
absl::Status ValidateDenseOptimizerSpec(const DenseOptimizerSpec& spec);

// The learning rate of step `step` (0-based).
double DenseLearningRate(const DenseOptimizerSpec& spec, int64_t step);

// The constants of step `step` (0-based: the steps applied before it).
DenseStepRule DenseStepRuleOf(const DenseOptimizerSpec& spec, int64_t step);

// How many first and second moments an optimizer of `spec` over
// `num_parameters` keeps (0 where its kind keeps none).
size_t FirstMomentsOf(const DenseOptimizerSpec& spec, size_t num_parameters);
size_t SecondMomentsOf(const DenseOptimizerSpec& spec, size_t num_parameters);

// DenseOptimizer::SaveState's bytes: the step count (int64), then the
// first and the second moments (float32 each; either may be empty).
std::string EncodeDenseOptimizerState(int64_t steps,
                                      absl::Span<const float> first,
                                      absl::Span<const float> second);
// The reverse, into spans of the moments' sizes; INVALID_ARGUMENT, with
// the sizes, for bytes of another size (nothing is written then).
absl::Status DecodeDenseOptimizerState(absl::string_view state,
                                       size_t num_parameters, int64_t* steps,
                                       absl::Span<float> first,
                                       absl::Span<float> second);

class DenseOptimizer {
 public:
  // INVALID_ARGUMENT naming the field for a bad spec.
  static absl::StatusOr<std::unique_ptr<DenseOptimizer>> Create(
      const DenseOptimizerSpec& spec, size_t num_parameters);
  virtual ~DenseOptimizer() = default;

  // The learning rate of step `step` (0-based).
  virtual double LearningRate(int64_t step) const = 0;

  // Applies one step. INVALID_ARGUMENT if the sizes differ from
  // num_parameters (nothing changes). REQUIRES: the two spans do not
  // overlap.
  virtual absl::Status Step(absl::Span<float> parameters,
                            absl::Span<const float> gradients) = 0;

  // Steps applied so far.
  virtual int64_t steps() const = 0;

  // Everything Step depends on besides the parameters (the step count and
  // the moment vectors), as bytes (EncodeDenseOptimizerState); RestoreState
  // takes them back. INVALID_ARGUMENT if `state` is not of this optimizer's
  // kind and size (nothing changes). SaveState fails only where the
  // moments live on a device that fails (INTERNAL with its error).
  virtual absl::StatusOr<std::string> SaveState() const = 0;
  virtual absl::Status RestoreState(absl::string_view state) = 0;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_DENSE_OPTIMIZER_H_
