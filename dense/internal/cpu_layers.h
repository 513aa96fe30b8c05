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
#include <functional>
#include <vector>

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
      : layers_(std::move(layers)), activations_(layers_.size()) {}

  bool empty() const { return layers_.empty(); }

  // Output (batch × last out) for input x (batch × first in). The result
  // and x must stay unchanged until Backward.
  const T* Forward(const T* parameters, const T* x, int batch);

  // Given `delta` = d loss / d output (batch × last out; used as scratch),
  // writes each layer's weight and bias gradients into `gradients` (same
  // layout as the parameters) and, when `dx` is not null, d loss / d x.
  void Backward(const T* parameters, const T* x, std::vector<T>* delta,
                int batch, T* gradients, T* dx);

 private:
  std::vector<LayerShape> layers_;
  std::vector<std::vector<T>> activations_;  // per layer, after ReLU
  std::vector<T> scratch_;
};

// features[b, 1 + slot, :] = pooled rows of bag b (F feature vectors of
// `dim` per sample). REQUIRES: offsets validated (ValidateBatch).
template <typename T>
void PoolBags(Pooling pooling, const T* rows, const int32_t* offsets, int batch,
              int dim, int slot, int num_features, T* features);

// Row gradients of one slot from d loss / d features.
template <typename T>
void UnpoolBags(Pooling pooling, const T* dfeatures, const int32_t* offsets,
                int batch, int dim, int slot, int num_features,
                T* row_gradients);

// out[b] = [features[b, 0, :], <f_i, f_j> for i < j] (batch × (dim +
// F(F-1)/2)).
template <typename T>
void Interact(const T* features, int batch, int num_features, int dim, T* out);

// dfeatures = d loss / d features from dout = d loss / d out.
template <typename T>
void InteractBackward(const T* features, const T* dout, int batch,
                      int num_features, int dim, T* dfeatures);

// Calls work(begin, end) over [0, n) split into `threads` contiguous
// ranges, the first on the calling thread, the others on threads started
// for the call (a step has two such regions: the start cost, ~20 µs, is
// small next to the work). Each range writes only its own samples.
void ForEachSampleRange(int n, int threads,
                        const std::function<void(int, int)>& work);

// Mean over the batch of the binary cross-entropy of sigmoid(logit),
// computed from the logits (no overflow for any finite logit); writes
// d mean loss / d logit into `dlogits` when not null.
template <typename T>
T BinaryCrossEntropy(const T* logits, const T* labels, int batch, T* dlogits);

}  // namespace embedps::dense_internal

#endif  // EMBEDPS_DENSE_INTERNAL_CPU_LAYERS_H_
