// CpuModel: the CPU backend of the dense model (model_spec.h), over the
// system BLAS. It is the reference the CUDA backend is compared with, and
// it is templated so that gradient checks run it in float64.
//
// Thread safety: one thread at a time per CpuModel. BLAS threads are set
// process-wide with SetBlasThreads (dense/blas.h).
#ifndef EMBEDPS_DENSE_CPU_MODEL_H_
#define EMBEDPS_DENSE_CPU_MODEL_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "dense/internal/cpu_layers.h"
#include "dense/model_spec.h"

namespace embedps::dense {

template <typename T>
class CpuModel {
 public:
  // INVALID_ARGUMENT (naming the field) for a bad spec. Parameters start
  // at InitializeParameters(spec).
  static absl::StatusOr<std::unique_ptr<CpuModel>> Create(
      const ModelSpec& spec);

  const ModelSpec& spec() const { return spec_; }
  const ModelLayout& layout() const { return layout_; }
  absl::Span<T> parameters() { return absl::MakeSpan(parameters_); }
  absl::Span<T> gradients() { return absl::MakeSpan(gradients_); }

  // Forward and backward on one batch. Returns the mean loss; leaves the
  // gradient of the mean loss in gradients(), writes d loss / d row for
  // every row of every slot into `row_gradients` (one span per slot, the
  // size of its rows) and, when `dense_gradients` is not empty,
  // d loss / d dense features. INVALID_ARGUMENT (nothing changes) for a
  // batch or buffers that do not fit the spec.
  absl::StatusOr<T> TrainStep(const Batch<T>& batch,
                              absl::Span<const absl::Span<T>> row_gradients,
                              absl::Span<T> dense_gradients = {});

  // The logits of the last TrainStep or Predict batch (empty before the
  // first). Valid until the next call.
  absl::Span<const T> last_logits() const { return last_logits_; }

  // Logits of the batch (labels are ignored). INVALID_ARGUMENT as above.
  absl::Status Predict(const Batch<T>& batch, absl::Span<T> logits);

 private:
  explicit CpuModel(const ModelSpec& spec);
  // Runs the forward pass; returns the logits.
  const T* Forward(const Batch<T>& batch);

  const ModelSpec spec_;
  const ModelLayout layout_;
  std::vector<T> parameters_, gradients_;
  dense_internal::LinearStack<T> bottom_, top_;
  // Per batch: features (size × F × z0_dim), the interaction output, and
  // the top MLP's input (the interaction, or z0 when there are no slots).
  std::vector<T> features_, interaction_;
  const T* top_input_ = nullptr;
  absl::Span<const T> last_logits_;
  std::vector<T> delta_, dinteraction_, dfeatures_, dz0_;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_CPU_MODEL_H_
