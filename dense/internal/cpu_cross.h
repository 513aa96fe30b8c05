// DCN-v2's cross network on the CPU (model_spec.h, Interaction::kCross):
// x_{l+1} = x0 ⊙ (x_l W_lᵀ + b_l) + x_l over a batch of rows, W_l full
// D × D. Private to dense/ (the CPU backend and its tests); T is float
// (training) or double (gradient checks).
//
// Thread safety: one thread at a time per CrossStack.
#ifndef EMBEDPS_DENSE_INTERNAL_CPU_CROSS_H_
#define EMBEDPS_DENSE_INTERNAL_CPU_CROSS_H_

#include <vector>

#include "dense/model_spec.h"

namespace embedps::dense_internal {

using ::embedps::dense::LayerShape;

template <typename T>
class CrossStack {
 public:
  // `layers`: D × D each (ModelLayout::cross).
  explicit CrossStack(std::vector<LayerShape> layers)
      : layers_(std::move(layers)),
        outputs_(layers_.size()),
        products_(layers_.size()),
        dproducts_(layers_.size()) {}

  bool empty() const { return layers_.empty(); }

  // x_L for x0 (batch × D); x0 must stay unchanged until BackwardWeights.
  const T* Forward(const T* parameters, const T* x0, int batch);

  // Given `dout` = d loss / d x_L (batch × D; taken over): keeps what the
  // weight gradients need and, when `dx0` is not null, writes d loss / d x0
  // (batch × D) there.
  void BackwardInputs(const T* parameters, std::vector<T>* dout, int batch,
                      T* dx0);
  // After BackwardInputs: each layer's W and b gradients into `gradients`
  // (the parameters' layout; written, not added).
  void BackwardWeights(int batch, T* gradients);

 private:
  // x_l: x0 for l = 0, then outputs_[l - 1].
  const T* Input(size_t l) const {
    return l == 0 ? x0_ : outputs_[l - 1].data();
  }

  std::vector<LayerShape> layers_;
  const T* x0_ = nullptr;
  std::vector<std::vector<T>> outputs_;    // x_{l+1}
  std::vector<std::vector<T>> products_;   // u_l = x_l W_lᵀ + b_l
  std::vector<std::vector<T>> dproducts_;  // d loss / d u_l
  std::vector<T> dx_, dx0_sum_;
};

}  // namespace embedps::dense_internal

#endif  // EMBEDPS_DENSE_INTERNAL_CPU_CROSS_H_
