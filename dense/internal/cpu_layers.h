// The CPU building blocks of the dense model: a stack of fully connected
// layers over BLAS, bag pooling, the dot-product interaction and the
// binary cross-entropy. Private to dense/ (the CPU backend and its tests);
// T is float (training) or double (gradient checks).
//
// Thread safety: LinearStack is used by one thread at a time; the free
// functions are pure.
#ifndef EMBEDPS_DENSE_INTERNAL_CPU_LAYERS_H_
#define EMBEDPS_DENSE_INTERNAL_CPU_LAYERS_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "absl/types/span.h"
#include "dense/model_spec.h"

namespace embedps::dense_internal {

using ::embedps::dense::LayerShape;
using ::embedps::dense::Pooling;

// Layers of a flat parameter buffer, applied in order; keeps the batch's
// activations between Forward and Backward.
template <typename T>
class LinearStack {
 public:
  explicit LinearStack(std::vector<LayerShape> layers)
      : layers_(std::move(layers)),
        activations_(layers_.size()),
        deltas_(layers_.size()) {}

  bool empty() const { return layers_.empty(); }

  // Output (batch × last out) for input x (batch × first in). The result
  // and x must stay unchanged until Backward.
  const T* Forward(const T* parameters, const T* x, int batch);

  // The backward pass in two halves, so that what depends on d loss / d x
  // can start before the weight gradients are computed.
  // BackwardInputs: given `delta` = d loss / d output (batch × last out;
  // taken over), keeps each layer's d loss / d pre-activation and, when
  // `dx` is not null, writes d loss / d x. BackwardWeights, after it and
  // before the next Forward: each layer's weight and bias gradients into
  // `gradients` (same layout as the parameters). Backward: both.
  void BackwardInputs(const T* parameters, std::vector<T>* delta, int batch,
                      T* dx);
  void BackwardWeights(const T* x, int batch, T* gradients);
  void Backward(const T* parameters, const T* x, std::vector<T>* delta,
                int batch, T* gradients, T* dx) {
    BackwardInputs(parameters, delta, batch, dx);
    BackwardWeights(x, batch, gradients);
  }

 private:
  std::vector<LayerShape> layers_;
  std::vector<std::vector<T>> activations_;  // per layer, after ReLU
  // Per layer, d loss / d pre-activation (BackwardInputs).
  std::vector<std::vector<T>> deltas_;
};

// The F feature vectors of samples [0, batch) as pointers (features[b·F +
// i]): feature 0 is row b of `z0` (batch × dim); feature 1 + s is slot s's
// bag of sample b — its row itself when the bag has exactly one (no copy:
// the usual case in CTR data), else the bag pooled (sum or mean; zeros
// when empty) into pooled[(b·S + s)·dim, +dim). `offsets` are the slots'
// offsets from the part's first sample. REQUIRES: offsets validated
// (ValidateBatch); pooled has batch × S × dim values.
template <typename T>
void GatherFeatures(absl::Span<const Pooling> pooling,
                    absl::Span<const dense::SlotBags<T>> slots, int first,
                    int batch, int dim, const T* z0, T* pooled,
                    const T** features);

// Where each feature's gradient goes, in the same arrangement:
// feature 0's into row b of dz0, a one-row bag's straight into that row's
// gradient, any other bag's into pooled_gradients (then UnpoolGradients).
template <typename T>
void FeatureGradientTargets(absl::Span<const dense::SlotBags<T>> slots,
                            absl::Span<const absl::Span<T>> row_gradients,
                            int first, int batch, int dim, T* dz0,
                            T* pooled_gradients, T** dfeatures);

// The row gradients of the bags that were pooled (not one row) from
// their features' gradients in pooled_gradients.
template <typename T>
void UnpoolGradients(absl::Span<const Pooling> pooling,
                     absl::Span<const dense::SlotBags<T>> slots,
                     absl::Span<const absl::Span<T>> row_gradients, int first,
                     int batch, int dim, const T* pooled_gradients);

// out[b] = [f_0, <f_i, f_j> for i < j] (batch × (dim + F(F-1)/2)) of
// features given as above (batch × F pointers).
template <typename T>
void Interact(const T* const* features, int batch, int num_features, int dim,
              T* out);

// d loss / d f_i of every sample into dfeatures[b·F + i] (dim values
// each) from dout = d loss / d out.
template <typename T>
void InteractBackward(const T* const* features, const T* dout, int batch,
                      int num_features, int dim, T* const* dfeatures);

// Calls kernel(std::integral_constant<int, W>) with W = dim for the widths
// the kernels are specialized for, W = 0 (read at run time) otherwise.
template <typename Kernel>
void WithWidth(int dim, Kernel&& kernel) {
  switch (dim) {
    case 16:
      return kernel(std::integral_constant<int, 16>());
    case 32:
      return kernel(std::integral_constant<int, 32>());
    case 64:
      return kernel(std::integral_constant<int, 64>());
    case 128:
      return kernel(std::integral_constant<int, 128>());
    default:
      return kernel(std::integral_constant<int, 0>());
  }
}

// The binary cross-entropy of sigmoid(logit) of `batch` samples, from the
// logits (no overflow for any finite logit), summed and divided by
// `mean_over`: these samples' share of the mean loss over a batch of
// `mean_over` samples (the whole batch when mean_over == batch). Writes
// that mean's derivative by each logit into `dlogits` when not null.
template <typename T>
T BinaryCrossEntropy(const T* logits, const T* labels, int batch, int mean_over,
                     T* dlogits);

}  // namespace embedps::dense_internal

#endif  // EMBEDPS_DENSE_INTERNAL_CPU_LAYERS_H_
