#include "dense/internal/cpu_cross.h"

#include <algorithm>
#include <cstddef>

#include "dense/blas.h"

namespace embedps::dense_internal {

using ::embedps::dense::Gemm;

template <typename T>
const T* CrossStack<T>::Forward(const T* parameters, const T* x0, int batch) {
  x0_ = x0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerShape& layer = layers_[l];
    const size_t size = static_cast<size_t>(batch) * layer.out;
    std::vector<T>& u = products_[l];
    u.resize(size);
    const T* x = Input(l);
    // U = X · Wᵀ + b, then x_{l+1} = x0 ⊙ U + X.
    Gemm<T>(false, true, batch, layer.out, layer.in, T{1}, x,
            parameters + layer.weight_offset, T{0}, u.data());
    const T* b = parameters + layer.bias_offset;
    std::vector<T>& out = outputs_[l];
    out.resize(size);
    for (int r = 0; r < batch; ++r) {
      const size_t row = static_cast<size_t>(r) * layer.out;
      T* ur = u.data() + row;
      for (int o = 0; o < layer.out; ++o) ur[o] += b[o];
      const T* x0r = x0 + row;
      const T* xr = x + row;
      T* yr = out.data() + row;
      for (int o = 0; o < layer.out; ++o) yr[o] = x0r[o] * ur[o] + xr[o];
    }
  }
  return layers_.empty() ? x0 : outputs_.back().data();
}

template <typename T>
void CrossStack<T>::BackwardInputs(const T* parameters, std::vector<T>* dout,
                                   int batch, T* dx0) {
  if (layers_.empty()) return;
  // dx_ holds d loss / d x_{l+1}, walking down. x0 is every layer's
  // factor and layer 0's input: its gradient sums Σ_l dx_{l+1} ⊙ u_l and
  // the gradient by x_0 itself.
  dx_.swap(*dout);
  const size_t size = dx_.size();
  if (dx0 != nullptr) dx0_sum_.assign(size, T{0});
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerShape& layer = layers_[l];
    std::vector<T>& du = dproducts_[l];
    du.resize(size);
    const T* g = dx_.data();
    const T* u = products_[l].data();
    for (size_t i = 0; i < size; ++i) du[i] = g[i] * x0_[i];
    if (dx0 != nullptr) {
      for (size_t i = 0; i < size; ++i) dx0_sum_[i] += g[i] * u[i];
    }
    if (l == 0 && dx0 == nullptr) break;
    // d loss / d x_l = dx_{l+1} + dU · W, in place (dU and x0 ⊙ ... were
    // taken from dx_{l+1} above).
    Gemm<T>(false, false, batch, layer.in, layer.out, T{1}, du.data(),
            parameters + layer.weight_offset, T{1}, dx_.data());
  }
  if (dx0 == nullptr) return;
  for (size_t i = 0; i < size; ++i) dx0[i] = dx_[i] + dx0_sum_[i];
}

template <typename T>
void CrossStack<T>::BackwardWeights(int batch, T* gradients) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerShape& layer = layers_[l];
    const std::vector<T>& du = dproducts_[l];
    // dW = dUᵀ · X, db = Σ_rows dU.
    Gemm<T>(true, false, layer.out, layer.in, batch, T{1}, du.data(), Input(l),
            T{0}, gradients + layer.weight_offset);
    T* db = gradients + layer.bias_offset;
    std::fill(db, db + layer.out, T{0});
    for (int r = 0; r < batch; ++r) {
      const T* row = du.data() + static_cast<size_t>(r) * layer.out;
      for (int o = 0; o < layer.out; ++o) db[o] += row[o];
    }
  }
}

template class CrossStack<float>;
template class CrossStack<double>;

}  // namespace embedps::dense_internal
