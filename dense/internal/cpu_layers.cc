#include "dense/internal/cpu_layers.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "dense/blas.h"
#include "dense/internal/interaction_x86.h"
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
    // Z = X · Wᵀ, then the bias and the ReLU in one pass over Z.
    Gemm<T>(false, true, batch, layer.out, layer.in, T{1}, input, w, T{0},
            z.data());
    const int out = layer.out;
    for (int r = 0; r < batch; ++r) {
      T* row = z.data() + static_cast<size_t>(r) * out;
      if (layer.relu) {
        for (int o = 0; o < out; ++o) {
          const T v = row[o] + b[o];
          row[o] = v > T{0} ? v : T{0};
        }
      } else {
        for (int o = 0; o < out; ++o) row[o] += b[o];
      }
    }
    input = z.data();
  }
  return input;
}

template <typename T>
void LinearStack<T>::BackwardInputs(const T* parameters, std::vector<T>* delta,
                                    int batch, T* dx) {
  if (layers_.empty()) return;
  deltas_.back().swap(*delta);
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerShape& layer = layers_[l];
    std::vector<T>& dz = deltas_[l];
    if (layer.relu) {
      // Through raw pointers, without a branch: vectorized.
      const T* a = activations_[l].data();
      T* g = dz.data();
      const size_t size = activations_[l].size();
      for (size_t i = 0; i < size; ++i) g[i] = a[i] > T{0} ? g[i] : T{0};
    }
    if (l == 0 && dx == nullptr) break;
    // dX = dZ · W: the layer below's d loss / d output, or dx.
    T* target = dx;
    if (l > 0) {
      deltas_[l - 1].resize(static_cast<size_t>(batch) * layer.in);
      target = deltas_[l - 1].data();
    }
    Gemm<T>(false, false, batch, layer.in, layer.out, T{1}, dz.data(),
            parameters + layer.weight_offset, T{0}, target);
  }
}

template <typename T>
void LinearStack<T>::BackwardWeights(const T* x, int batch, T* gradients) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerShape& layer = layers_[l];
    const std::vector<T>& dz = deltas_[l];
    const T* input = l == 0 ? x : activations_[l - 1].data();
    // dW = dZᵀ · X, db = Σ_rows dZ.
    Gemm<T>(true, false, layer.out, layer.in, batch, T{1}, dz.data(), input,
            T{0}, gradients + layer.weight_offset);
    T* db = gradients + layer.bias_offset;
    std::fill(db, db + layer.out, T{0});
    for (int r = 0; r < batch; ++r) {
      const T* row = dz.data() + static_cast<size_t>(r) * layer.out;
      for (int o = 0; o < layer.out; ++o) db[o] += row[o];
    }
  }
}

template <typename T>
void GatherFeatures(absl::Span<const Pooling> pooling,
                    absl::Span<const dense::SlotBags<T>> slots, int first,
                    int batch, int dim, const T* z0, T* pooled,
                    const T** features) {
  const size_t num_slots = slots.size(), f = num_slots + 1;
  for (int b = 0; b < batch; ++b) {
    const T** x = features + b * f;
    x[0] = z0 + static_cast<size_t>(b) * dim;
    for (size_t s = 0; s < num_slots; ++s) {
      const int32_t begin = slots[s].offsets[first + b];
      const int32_t end = slots[s].offsets[first + b + 1];
      const T* rows = slots[s].rows.data();
      if (end - begin == 1) {
        x[1 + s] = rows + static_cast<size_t>(begin) * dim;
        continue;
      }
      T* out = pooled + (b * num_slots + s) * dim;
      std::fill(out, out + dim, T{0});
      for (int32_t k = begin; k < end; ++k) {
        const T* row = rows + static_cast<size_t>(k) * dim;
        for (int i = 0; i < dim; ++i) out[i] += row[i];
      }
      if (pooling[s] == Pooling::kMean && end > begin) {
        const T scale = T{1} / static_cast<T>(end - begin);
        for (int i = 0; i < dim; ++i) out[i] *= scale;
      }
      x[1 + s] = out;
    }
  }
}

template <typename T>
void FeatureGradientTargets(absl::Span<const dense::SlotBags<T>> slots,
                            absl::Span<const absl::Span<T>> row_gradients,
                            int first, int batch, int dim, T* dz0,
                            T* pooled_gradients, T** dfeatures) {
  const size_t num_slots = slots.size(), f = num_slots + 1;
  for (int b = 0; b < batch; ++b) {
    T** dx = dfeatures + b * f;
    dx[0] = dz0 + static_cast<size_t>(b) * dim;
    for (size_t s = 0; s < num_slots; ++s) {
      const int32_t begin = slots[s].offsets[first + b];
      const int32_t end = slots[s].offsets[first + b + 1];
      dx[1 + s] =
          end - begin == 1
              ? row_gradients[s].data() + static_cast<size_t>(begin) * dim
              : pooled_gradients + (b * num_slots + s) * dim;
    }
  }
}

template <typename T>
void UnpoolGradients(absl::Span<const Pooling> pooling,
                     absl::Span<const dense::SlotBags<T>> slots,
                     absl::Span<const absl::Span<T>> row_gradients, int first,
                     int batch, int dim, const T* pooled_gradients) {
  const size_t num_slots = slots.size();
  for (int b = 0; b < batch; ++b) {
    for (size_t s = 0; s < num_slots; ++s) {
      const int32_t begin = slots[s].offsets[first + b];
      const int32_t end = slots[s].offsets[first + b + 1];
      if (end - begin == 1) continue;  // written by InteractBackward
      const T* g = pooled_gradients + (b * num_slots + s) * dim;
      const T scale = pooling[s] == Pooling::kMean && end > begin
                          ? T{1} / static_cast<T>(end - begin)
                          : T{1};
      for (int32_t k = begin; k < end; ++k) {
        T* out = row_gradients[s].data() + static_cast<size_t>(k) * dim;
        for (int i = 0; i < dim; ++i) out[i] = g[i] * scale;
      }
    }
  }
}

namespace {

// 32 bytes of T as a GCC/Clang vector (one AVX register; two SSE ones on
// x86-64-v2): arithmetic lane by lane, exactly as the scalar loops.
template <typename T>
struct Vector {
  typedef T Type __attribute__((vector_size(32)));
  static constexpr int kLanes = 32 / sizeof(T);
  static Type Load(const T* p) {
    Type v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  }
  static void Store(Type v, T* p) { std::memcpy(p, &v, sizeof(v)); }
};

// Where <f_i, f_j> (i != j; symmetric) is in a sample's interaction
// output of width dim + F(F-1)/2: pairs i < j follow f_0, row after row.
// F × F, 0 on the diagonal.
std::vector<int> PairPositions(int f, int dim) {
  std::vector<int> pair(static_cast<size_t>(f) * f, 0);
  for (int i = 0, p = dim; i < f; ++i) {
    for (int j = i + 1; j < f; ++j, ++p) {
      pair[static_cast<size_t>(i) * f + j] = p;
      pair[static_cast<size_t>(j) * f + i] = p;
    }
  }
  return pair;
}

// The interaction's kernels, with the feature width a compile-time
// constant (kDim > 0) so that a row's accumulators live in vector
// registers, or read at run time (kDim == 0, any width). Every dot product
// is summed in k order, the same in every instantiation. Float features a
// multiple of 8 wide go to the AVX2 kernels instead where the build has
// them (interaction_x86.h).

// out[b] = [f_0, <f_i, f_j> for i < j]. Per sample the features are
// transposed (dim × F, F padded to a block of kBlock columns), and each
// group of kRows features i is multiplied by a block of kBlock columns j at
// once: kRows × kBlock independent sums, no horizontal additions.
template <typename T, int kDim>
void InteractKernel(const T* const* features, int batch, int num_features,
                    int runtime_dim, T* out) {
  // Each group of kRows features i against a block of kBlock columns j:
  // kRows × kBlockVectors independent vector sums.
  using V = typename Vector<T>::Type;
  constexpr int kLanes = Vector<T>::kLanes;
  constexpr int kRows = 4, kBlockVectors = 1;
  constexpr int kBlock = kBlockVectors * kLanes;
  const int dim = kDim > 0 ? kDim : runtime_dim;
  const int f = num_features;
  const int padded = (f + kBlock - 1) / kBlock * kBlock;
  const int out_dim = dim + f * (f - 1) / 2;
  std::vector<T> transposed(static_cast<size_t>(dim) * padded, T{0});
  const std::vector<int> pair = PairPositions(f, dim);
  for (int b = 0; b < batch; ++b) {
    const T* const* x = features + static_cast<size_t>(b) * f;
    T* o = out + static_cast<size_t>(b) * out_dim;
    std::copy(x[0], x[0] + dim, o);
    for (int i = 0; i < f; ++i) {
      for (int k = 0; k < dim; ++k) {
        transposed[static_cast<size_t>(k) * padded + i] = x[i][k];
      }
    }
    for (int i0 = 0; i0 < f - 1; i0 += kRows) {
      const T* row[kRows];
      for (int r = 0; r < kRows; ++r) {
        row[r] = x[std::min(i0 + r, f - 1)];
      }
      // Blocks holding some j > i0.
      for (int j0 = (i0 + 1) / kBlock * kBlock; j0 < f; j0 += kBlock) {
        T sum[kRows][kBlock];
        V acc[kRows][kBlockVectors] = {};
        for (int k = 0; k < dim; ++k) {
          const T* column =
              transposed.data() + static_cast<size_t>(k) * padded + j0;
          V c[kBlockVectors];
          for (int v = 0; v < kBlockVectors; ++v) {
            c[v] = Vector<T>::Load(column + v * kLanes);
          }
          for (int r = 0; r < kRows; ++r) {
            const V a = V{} + row[r][k];
            for (int v = 0; v < kBlockVectors; ++v) acc[r][v] += a * c[v];
          }
        }
        for (int r = 0; r < kRows; ++r) {
          for (int v = 0; v < kBlockVectors; ++v) {
            Vector<T>::Store(acc[r][v], sum[r] + v * kLanes);
          }
        }
        for (int r = 0; r < kRows && i0 + r < f; ++r) {
          const int i = i0 + r;
          for (int l = 0; l < kBlock && j0 + l < f; ++l) {
            const int j = j0 + l;
            if (j > i) o[pair[static_cast<size_t>(i) * f + j]] = sum[r][l];
          }
        }
      }
    }
  }
}

// d f_i = Σ_j g_ij f_j (g symmetric: d out / d <f_i, f_j>, 0 on the
// diagonal), plus d out[0..dim) for f_0. A row's sum is kept whole
// (dim values) across the j loop.
template <typename T, int kDim>
void InteractBackwardKernel(const T* const* features, const T* dout, int batch,
                            int num_features, int runtime_dim,
                            T* const* dfeatures) {
  const int dim = kDim > 0 ? kDim : runtime_dim;
  const int f = num_features;
  const int out_dim = dim + f * (f - 1) / 2;
  const std::vector<int> pair = PairPositions(f, dim);
  std::vector<T> runtime_sum(kDim > 0 ? 0 : dim);
  std::vector<T> local(static_cast<size_t>(f) * dim);
  std::vector<T> g_row(f);
  T* const gi = g_row.data();
  for (int b = 0; b < batch; ++b) {
    const T* const* x = features + static_cast<size_t>(b) * f;
    const T* d = dout + static_cast<size_t>(b) * out_dim;
    T* const* dx = dfeatures + static_cast<size_t>(b) * f;
    // The sample's features side by side: read F times each below, and
    // where they are bags' rows in place, the same offset in F arrays
    // would share a handful of cache sets.
    for (int i = 0; i < f; ++i) {
      std::copy(x[i], x[i] + dim, local.data() + static_cast<size_t>(i) * dim);
    }
    for (int i = 0; i < f; ++i) {
      T fixed_sum[kDim > 0 ? kDim : 1];
      T* sum = kDim > 0 ? fixed_sum : runtime_sum.data();
      for (int k = 0; k < dim; ++k) sum[k] = i == 0 ? d[k] : T{0};
      // Row i of the symmetric gradient (0 on the diagonal).
      const int* pair_i = pair.data() + static_cast<size_t>(i) * f;
      for (int j = 0; j < f; ++j) gi[j] = j == i ? T{0} : d[pair_i[j]];
      if constexpr (kDim > 0 && kDim % Vector<T>::kLanes == 0) {
        // The row's sums in vector registers across the j loop (as plain
        // loops GCC 12 either kept them in memory or, for dim 16, unrolled
        // them into scalar code).
        using V = typename Vector<T>::Type;
        constexpr int kLanes = Vector<T>::kLanes;
        // Four vectors of the row at a time (more would not stay in
        // registers).
        constexpr int kChunk = std::min(4, kDim / kLanes);
        static_assert(kDim % (kChunk * kLanes) == 0);
        for (int k0 = 0; k0 < kDim; k0 += kChunk * kLanes) {
          V acc[kChunk];
          for (int v = 0; v < kChunk; ++v) {
            acc[v] = Vector<T>::Load(sum + k0 + v * kLanes);
          }
          for (int j = 0; j < f; ++j) {
            const V c = V{} + gi[j];
            const T* xj = local.data() + static_cast<size_t>(j) * dim + k0;
            for (int v = 0; v < kChunk; ++v) {
              acc[v] += c * Vector<T>::Load(xj + v * kLanes);
            }
          }
          for (int v = 0; v < kChunk; ++v) {
            Vector<T>::Store(acc[v], sum + k0 + v * kLanes);
          }
        }
      } else {
        for (int j = 0; j < f; ++j) {
          const T c = gi[j];
          const T* xj = local.data() + static_cast<size_t>(j) * dim;
          for (int k = 0; k < dim; ++k) sum[k] += c * xj[k];
        }
      }
      std::copy(sum, sum + dim, dx[i]);
    }
  }
}

}  // namespace

template <typename T>
void Interact(const T* const* features, int batch, int num_features, int dim,
              T* out) {
  if constexpr (std::is_same_v<T, float> && kHaveAvx2Interaction) {
    if (dim % 8 == 0) {
      return InteractAvx2(features, batch, num_features, dim, out);
    }
  }
  WithWidth(dim, [&](auto width) {
    InteractKernel<T, decltype(width)::value>(features, batch, num_features,
                                              dim, out);
  });
}

template <typename T>
void InteractBackward(const T* const* features, const T* dout, int batch,
                      int num_features, int dim, T* const* dfeatures) {
  if constexpr (std::is_same_v<T, float> && kHaveAvx2Interaction) {
    if (dim % 16 == 0 && HaveAvx512InteractionBackward()) {
      return InteractBackwardAvx512(features, dout, batch, num_features, dim,
                                    dfeatures);
    }
    if (dim % 8 == 0) {
      return InteractBackwardAvx2(features, dout, batch, num_features, dim,
                                  dfeatures);
    }
  }
  WithWidth(dim, [&](auto width) {
    InteractBackwardKernel<T, decltype(width)::value>(
        features, dout, batch, num_features, dim, dfeatures);
  });
}

template <typename T>
T BinaryCrossEntropy(const T* logits, const T* labels, int batch, int mean_over,
                     T* dlogits) {
  // Per sample dense::LogLossOfLogit; derivative σ(z) - y.
  T loss = 0;
  for (int r = 0; r < batch; ++r) {
    const T z = logits[r], y = labels[r];
    loss += dense::LogLossOfLogit(z, y);
    if (dlogits != nullptr) {
      const T e = std::exp(-std::abs(z));
      const T sigmoid = z >= 0 ? T{1} / (T{1} + e) : e / (T{1} + e);
      dlogits[r] = (sigmoid - y) / static_cast<T>(mean_over);
    }
  }
  return loss / static_cast<T>(mean_over);
}

#define EMBEDPS_INSTANTIATE(T)                                                \
  template class LinearStack<T>;                                              \
  template void GatherFeatures<T>(absl::Span<const Pooling>,                  \
                                  absl::Span<const dense::SlotBags<T>>, int,  \
                                  int, int, const T*, T*, const T**);         \
  template void FeatureGradientTargets<T>(                                    \
      absl::Span<const dense::SlotBags<T>>, absl::Span<const absl::Span<T>>,  \
      int, int, int, T*, T*, T**);                                            \
  template void UnpoolGradients<T>(                                           \
      absl::Span<const Pooling>, absl::Span<const dense::SlotBags<T>>,        \
      absl::Span<const absl::Span<T>>, int, int, int, const T*);              \
  template void Interact<T>(const T* const*, int, int, int, T*);              \
  template void InteractBackward<T>(const T* const*, const T*, int, int, int, \
                                    T* const*);                               \
  template T BinaryCrossEntropy<T>(const T*, const T*, int, int, T*);
EMBEDPS_INSTANTIATE(float)
EMBEDPS_INSTANTIATE(double)
#undef EMBEDPS_INSTANTIATE

}  // namespace embedps::dense_internal
