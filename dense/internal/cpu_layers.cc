#include "dense/internal/cpu_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

#include "dense/blas.h"
#include "dense/log_loss.h"

namespace embedps::dense_internal {

using ::embedps::dense::Gemm;

template <typename T>
const T* LinearStack<T>::Forward(const T* parameters, const T* x, int batch) {
  const T* input = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerShape& layer = layers_[l];
    const T* w = parameters + layer.weight_offset;
    const T* b = parameters + layer.bias_offset;
    std::vector<T>& z = activations_[l];
    z.resize(static_cast<size_t>(batch) * layer.out);
    for (int r = 0; r < batch; ++r) {
      std::copy(b, b + layer.out,
                z.data() + static_cast<size_t>(r) * layer.out);
    }
    // Z = X · Wᵀ + b
    Gemm<T>(false, true, batch, layer.out, layer.in, T{1}, input, w, T{1},
            z.data());
    if (layer.relu) {
      for (T& v : z) v = v > T{0} ? v : T{0};
    }
    input = z.data();
  }
  return input;
}

template <typename T>
void LinearStack<T>::Backward(const T* parameters, const T* x,
                              std::vector<T>* delta, int batch, T* gradients,
                              T* dx) {
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerShape& layer = layers_[l];
    if (layer.relu) {
      const std::vector<T>& a = activations_[l];
      for (size_t i = 0; i < a.size(); ++i) {
        if (!(a[i] > T{0})) (*delta)[i] = T{0};
      }
    }
    const T* input = l == 0 ? x : activations_[l - 1].data();
    // dW = dZᵀ · X, db = Σ_rows dZ, dX = dZ · W.
    Gemm<T>(true, false, layer.out, layer.in, batch, T{1}, delta->data(), input,
            T{0}, gradients + layer.weight_offset);
    T* db = gradients + layer.bias_offset;
    std::fill(db, db + layer.out, T{0});
    for (int r = 0; r < batch; ++r) {
      const T* row = delta->data() + static_cast<size_t>(r) * layer.out;
      for (int o = 0; o < layer.out; ++o) db[o] += row[o];
    }
    if (l == 0 && dx == nullptr) break;
    T* target = dx;
    if (l > 0) {
      scratch_.resize(static_cast<size_t>(batch) * layer.in);
      target = scratch_.data();
    }
    Gemm<T>(false, false, batch, layer.in, layer.out, T{1}, delta->data(),
            parameters + layer.weight_offset, T{0}, target);
    if (l == 0) break;
    delta->swap(scratch_);
  }
}

template <typename T>
void PoolBags(Pooling pooling, const T* rows, const int32_t* offsets, int batch,
              int dim, int slot, int num_features, T* features) {
  for (int b = 0; b < batch; ++b) {
    T* out =
        features + (static_cast<size_t>(b) * num_features + 1 + slot) * dim;
    std::fill(out, out + dim, T{0});
    const int32_t begin = offsets[b], end = offsets[b + 1];
    for (int32_t k = begin; k < end; ++k) {
      const T* row = rows + static_cast<size_t>(k) * dim;
      for (int i = 0; i < dim; ++i) out[i] += row[i];
    }
    if (pooling == Pooling::kMean && end > begin) {
      const T scale = T{1} / static_cast<T>(end - begin);
      for (int i = 0; i < dim; ++i) out[i] *= scale;
    }
  }
}

template <typename T>
void UnpoolBags(Pooling pooling, const T* dfeatures, const int32_t* offsets,
                int batch, int dim, int slot, int num_features,
                T* row_gradients) {
  for (int b = 0; b < batch; ++b) {
    const T* g =
        dfeatures + (static_cast<size_t>(b) * num_features + 1 + slot) * dim;
    const int32_t begin = offsets[b], end = offsets[b + 1];
    const T scale = pooling == Pooling::kMean && end > begin
                        ? T{1} / static_cast<T>(end - begin)
                        : T{1};
    for (int32_t k = begin; k < end; ++k) {
      T* out = row_gradients + static_cast<size_t>(k) * dim;
      for (int i = 0; i < dim; ++i) out[i] = g[i] * scale;
    }
  }
}

// Σ_k a[k]·b[k] in a fixed order that vectorizes: kLanes partial sums (k
// modulo kLanes), then those summed pairwise. A single running sum cannot
// be vectorized without reassociating it (no -ffast-math here), and that
// dependency chain was most of the CPU DLRM's step.
template <typename T>
T Dot(const T* a, const T* b, int n) {
  constexpr int kLanes = 16;
  T lane[kLanes] = {};
  int k = 0;
  for (; k + kLanes <= n; k += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += a[k + l] * b[k + l];
  }
  for (int l = 0; k < n; ++k, ++l) lane[l] += a[k] * b[k];
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  }
  return lane[0];
}

template <typename T>
void Interact(const T* features, int batch, int num_features, int dim, T* out) {
  const int out_dim = dim + num_features * (num_features - 1) / 2;
  for (int b = 0; b < batch; ++b) {
    const T* f = features + static_cast<size_t>(b) * num_features * dim;
    T* o = out + static_cast<size_t>(b) * out_dim;
    std::copy(f, f + dim, o);
    int p = dim;
    for (int i = 0; i < num_features; ++i) {
      for (int j = i + 1; j < num_features; ++j) {
        o[p++] = Dot(f + static_cast<size_t>(i) * dim,
                     f + static_cast<size_t>(j) * dim, dim);
      }
    }
  }
}

template <typename T>
void InteractBackward(const T* features, const T* dout, int batch,
                      int num_features, int dim, T* dfeatures) {
  const int out_dim = dim + num_features * (num_features - 1) / 2;
  for (int b = 0; b < batch; ++b) {
    const T* f = features + static_cast<size_t>(b) * num_features * dim;
    const T* g = dout + static_cast<size_t>(b) * out_dim;
    T* df = dfeatures + static_cast<size_t>(b) * num_features * dim;
    std::copy(g, g + dim, df);
    std::fill(df + dim, df + static_cast<size_t>(num_features) * dim, T{0});
    int p = dim;
    for (int i = 0; i < num_features; ++i) {
      for (int j = i + 1; j < num_features; ++j) {
        const T gp = g[p++];
        const T* fi = f + static_cast<size_t>(i) * dim;
        const T* fj = f + static_cast<size_t>(j) * dim;
        T* dfi = df + static_cast<size_t>(i) * dim;
        T* dfj = df + static_cast<size_t>(j) * dim;
        for (int k = 0; k < dim; ++k) {
          dfi[k] += gp * fj[k];
          dfj[k] += gp * fi[k];
        }
      }
    }
  }
}

void ForEachSampleRange(int n, int threads,
                        const std::function<void(int, int)>& work) {
  threads = std::max(1, std::min(threads, n / 16));
  if (threads <= 1) {
    work(0, n);
    return;
  }
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  const auto begin_of = [&](int t) {
    return static_cast<int>(static_cast<int64_t>(n) * t / threads);
  };
  for (int t = 1; t < threads; ++t) {
    helpers.emplace_back(work, begin_of(t), begin_of(t + 1));
  }
  work(0, begin_of(1));
  for (std::thread& helper : helpers) helper.join();
}

template <typename T>
T BinaryCrossEntropy(const T* logits, const T* labels, int batch, T* dlogits) {
  // Per sample dense::LogLossOfLogit; derivative σ(z) - y.
  T loss = 0;
  for (int r = 0; r < batch; ++r) {
    const T z = logits[r], y = labels[r];
    loss += dense::LogLossOfLogit(z, y);
    if (dlogits != nullptr) {
      const T e = std::exp(-std::abs(z));
      const T sigmoid = z >= 0 ? T{1} / (T{1} + e) : e / (T{1} + e);
      dlogits[r] = (sigmoid - y) / static_cast<T>(batch);
    }
  }
  return loss / static_cast<T>(batch);
}

#define EMBEDPS_INSTANTIATE(T)                                                \
  template class LinearStack<T>;                                              \
  template void PoolBags<T>(Pooling, const T*, const int32_t*, int, int, int, \
                            int, T*);                                         \
  template void UnpoolBags<T>(Pooling, const T*, const int32_t*, int, int,    \
                              int, int, T*);                                  \
  template void Interact<T>(const T*, int, int, int, T*);                     \
  template void InteractBackward<T>(const T*, const T*, int, int, int, T*);   \
  template T BinaryCrossEntropy<T>(const T*, const T*, int, T*);
EMBEDPS_INSTANTIATE(float)
EMBEDPS_INSTANTIATE(double)
#undef EMBEDPS_INSTANTIATE

}  // namespace embedps::dense_internal
