// Mlp: a multi-layer perceptron ending in one logit, trained with binary
// cross-entropy from logits — the plain dense model that trains through the
// collective path alone, and the building block of DLRM's bottom and top
// MLPs. CPU backend over BLAS; T is float (training) or double (gradient
// checks).
//
// Parameters and gradients live in one flat buffer each (one allreduce
// covers all gradients): for each layer l, W_l (out × in, row-major) then
// b_l (out). Hidden layers use ReLU.
//
// Thread safety: one thread at a time per Mlp.
#ifndef EMBEDPS_DENSE_MLP_H_
#define EMBEDPS_DENSE_MLP_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace embedps::dense {

struct MlpSpec {
  int input_dim = 0;
  // Widths of the hidden layers; the output layer (1 logit) is implicit.
  std::vector<int> hidden;
  // Seed of the initialization: the same seed gives bit-identical
  // parameters on every rank and machine. Default: 0.
  uint64_t seed = 0;
};

template <typename T>
class Mlp {
 public:
  // INVALID_ARGUMENT for a non-positive width.
  static absl::StatusOr<std::unique_ptr<Mlp>> Create(const MlpSpec& spec);

  size_t num_parameters() const { return parameters_.size(); }
  absl::Span<T> parameters() { return absl::MakeSpan(parameters_); }
  absl::Span<const T> gradients() const { return gradients_; }

  // Logits of `batch` rows of `x` (batch × input_dim) into `logits`.
  absl::Status Predict(absl::Span<const T> x, int batch, absl::Span<T> logits);

  // Forward and backward on one batch; returns the mean loss and leaves
  // the gradient of the mean loss in gradients(). `input_gradient`, when
  // not empty (batch × input_dim), receives d loss / d x. INVALID_ARGUMENT
  // for sizes that do not match, or labels outside [0, 1].
  absl::StatusOr<T> TrainStep(absl::Span<const T> x, absl::Span<const T> labels,
                              int batch, absl::Span<T> input_gradient = {});

 private:
  explicit Mlp(const MlpSpec& spec);
  absl::Status CheckBatch(absl::Span<const T> x, int batch) const;
  void Forward(const T* x, int batch);

  std::vector<int> widths_;      // input_dim, hidden..., 1
  std::vector<size_t> offsets_;  // start of W_l in parameters_
  std::vector<T> parameters_, gradients_;
  // Per layer, the batch's activations (after ReLU; the last: logits).
  std::vector<std::vector<T>> activations_;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_MLP_H_
