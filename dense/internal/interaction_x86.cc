#include "dense/internal/interaction_x86.h"

#if defined(__AVX2__) && defined(__FMA__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "dense/internal/cpu_layers.h"

namespace embedps::dense_internal {
namespace {

constexpr int kLanes = 8;

// [Σ lanes of a[0], …, a[3], Σ lanes of b[0], …, b[3]]: lanes added in
// pairs within each half, then the halves.
inline __m256 SumLanes(const __m256 a[4], const __m256 b[4]) {
  const __m256 a_halves =
      _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 b_halves =
      _mm256_hadd_ps(_mm256_hadd_ps(b[0], b[1]), _mm256_hadd_ps(b[2], b[3]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a_halves, b_halves, 0x20),
                       _mm256_permute2f128_ps(a_halves, b_halves, 0x31));
}

// Sample b's F rows side by side into `local` (F × dim; bags' rows in
// place would share a few cache sets, and each is read several times),
// and sample b + 1's rows, scattered over the Pulls' buffers and mostly not
// in cache, fetched while this one computes.
void GatherSample(const float* const* features, int b, int batch, int f,
                  int dim, float* local) {
  const float* const* x = features + static_cast<size_t>(b) * f;
  for (int i = 0; i < f; ++i) {
    std::memcpy(local + static_cast<size_t>(i) * dim, x[i],
                sizeof(float) * dim);
  }
  if (b + 1 == batch) return;
  for (int i = 0; i < f; ++i) {
    for (int k = 0; k < dim; k += 64 / sizeof(float)) {
      _mm_prefetch(reinterpret_cast<const char*>(x[f + i] + k), _MM_HINT_T0);
    }
  }
}

// A sample's pair gradients d out / d <f_i, f_j> (i < j, after f_0's dim
// values in `d`) as the symmetric F × F matrix g (row-major, f columns);
// the diagonal is left as it is (zero).
void FillPairGradients(const float* d, int f, int dim, float* g) {
  for (int i = 0, p = dim; i < f; ++i) {
    for (int j = i + 1; j < f; ++j, ++p) {
      g[static_cast<size_t>(i) * f + j] = d[p];
      g[static_cast<size_t>(j) * f + i] = d[p];
    }
  }
}

// Where <f_i, f_j> (i < j) is in a sample's output: after f_0's dim
// values, the pairs row after row.
inline int PairPosition(int i, int j, int f, int dim) {
  return dim + i * f - i * (i + 1) / 2 + (j - i - 1);
}

// kVectors: dim / 8 when fixed at compile time (the loops over a row
// unrolled), 0 to read dim at run time.
template <int kVectors>
void Kernel(const float* const* features, int batch, int f, int runtime_dim,
            float* out) {
  const int dim = kVectors > 0 ? kVectors * kLanes : runtime_dim;
  const int vectors = dim / kLanes;
  const int out_dim = dim + f * (f - 1) / 2;
  std::vector<float> local(static_cast<size_t>(f) * dim);
  for (int b = 0; b < batch; ++b) {
    float* o = out + static_cast<size_t>(b) * out_dim;
    std::memcpy(o, features[static_cast<size_t>(b) * f], sizeof(float) * dim);
    GatherSample(features, b, batch, f, dim, local.data());
    // Rows i0 and i1 = i0 + 1 against columns j0 .. j0 + 3 (j > i0): eight
    // independent sums a vector wide.
    for (int i0 = 0; i0 + 1 < f; i0 += 2) {
      const int i1 = i0 + 1;
      const float* r0 = local.data() + static_cast<size_t>(i0) * dim;
      const float* r1 = local.data() + static_cast<size_t>(i1) * dim;
      for (int j0 = i1; j0 < f; j0 += 4) {
        const int columns = std::min(4, f - j0);
        const float* c[4];
        for (int l = 0; l < 4; ++l) {
          // Past the last feature: any row; the sum is not used.
          c[l] =
              local.data() + static_cast<size_t>(std::min(j0 + l, f - 1)) * dim;
        }
        __m256 a[4], s[4];
        for (int l = 0; l < 4; ++l) a[l] = s[l] = _mm256_setzero_ps();
        for (int v = 0; v < (kVectors > 0 ? kVectors : vectors); ++v) {
          const __m256 x0 = _mm256_loadu_ps(r0 + v * kLanes);
          const __m256 x1 = _mm256_loadu_ps(r1 + v * kLanes);
          for (int l = 0; l < 4; ++l) {
            const __m256 y = _mm256_loadu_ps(c[l] + v * kLanes);
            a[l] = _mm256_fmadd_ps(x0, y, a[l]);
            s[l] = _mm256_fmadd_ps(x1, y, s[l]);
          }
        }
        alignas(32) float sums[8];
        _mm256_store_ps(sums, SumLanes(a, s));
        const int p0 = PairPosition(i0, j0, f, dim);
        for (int l = 0; l < columns; ++l) o[p0 + l] = sums[l];
        for (int l = 0; l < columns; ++l) {
          const int j = j0 + l;
          if (j > i1) o[PairPosition(i1, j, f, dim)] = sums[4 + l];
        }
      }
    }
  }
}

// d f_i = [i = 0] d out[0, dim) + Σ_j g_ij f_j (g symmetric, 0 on the
// diagonal): per sample a small matrix product, rows i0 and i0 + 1 of the
// result a chunk of kChunk vectors wide at a time (2 × kChunk sums in
// registers across the j loop). kVectors as in Kernel.
template <int kVectors>
void BackwardKernel(const float* const* features, const float* dout, int batch,
                    int f, int runtime_dim, float* const* dfeatures) {
  const int dim = kVectors > 0 ? kVectors * kLanes : runtime_dim;
  const int vectors = dim / kLanes;
  constexpr int kChunk = kVectors > 0 && kVectors < 4 ? kVectors : 4;
  const int out_dim = dim + f * (f - 1) / 2;
  std::vector<float> local(static_cast<size_t>(f) * dim);
  // The sample's g as an F × F matrix, a row padded to an even count.
  std::vector<float> g(static_cast<size_t>(f + 1) * f, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* d = dout + static_cast<size_t>(b) * out_dim;
    float* const* dx = dfeatures + static_cast<size_t>(b) * f;
    GatherSample(features, b, batch, f, dim, local.data());
    FillPairGradients(d, f, dim, g.data());
    for (int i0 = 0; i0 < f; i0 += 2) {
      // With an odd F the last row pairs with the padding row (all zero).
      const int i1 = i0 + 1;
      const float* g0 = g.data() + static_cast<size_t>(i0) * f;
      const float* g1 = g.data() + static_cast<size_t>(i1) * f;
      for (int v0 = 0; v0 < vectors; v0 += kChunk) {
        const int chunk =
            kVectors > 0 ? kChunk : std::min(kChunk, vectors - v0);
        __m256 a[kChunk], s[kChunk];
        for (int v = 0; v < kChunk; ++v) a[v] = s[v] = _mm256_setzero_ps();
        for (int j = 0; j < f; ++j) {
          const __m256 c0 = _mm256_broadcast_ss(g0 + j);
          const __m256 c1 = _mm256_broadcast_ss(g1 + j);
          const float* y = local.data() + static_cast<size_t>(j) * dim +
                           static_cast<size_t>(v0) * kLanes;
          for (int v = 0; v < chunk; ++v) {
            const __m256 yv = _mm256_loadu_ps(y + v * kLanes);
            a[v] = _mm256_fmadd_ps(c0, yv, a[v]);
            s[v] = _mm256_fmadd_ps(c1, yv, s[v]);
          }
        }
        for (int v = 0; v < chunk; ++v) {
          const int k = (v0 + v) * kLanes;
          if (i0 == 0) a[v] = _mm256_add_ps(a[v], _mm256_loadu_ps(d + k));
          _mm256_storeu_ps(dx[i0] + k, a[v]);
          if (i1 < f) _mm256_storeu_ps(dx[i1] + k, s[v]);
        }
      }
    }
  }
}

// BackwardKernel in 16-lane registers: rows i0 .. i0 + 3 of the result
// a chunk of kChunk vectors wide at a time (up to 16 sums in registers of
// the 32 across the j loop). Every output element is the same fused
// multiply-add chain over j as in BackwardKernel, so the two agree bit for
// bit. kVectors: dim / 16 when fixed at compile time, 0 otherwise.
template <int kVectors>
__attribute__((target("avx512f"))) void BackwardKernel512(
    const float* const* features, const float* dout, int batch, int f,
    int runtime_dim, float* const* dfeatures) {
  constexpr int kLanes512 = 16;
  constexpr int kRows = 4;
  const int dim = kVectors > 0 ? kVectors * kLanes512 : runtime_dim;
  const int vectors = dim / kLanes512;
  constexpr int kChunk = kVectors > 0 && kVectors < 4 ? kVectors : 4;
  const int out_dim = dim + f * (f - 1) / 2;
  std::vector<float> local(static_cast<size_t>(f) * dim);
  // g as in BackwardKernel, its rows padded to a multiple of kRows (zero).
  const int padded_rows = (f + kRows - 1) / kRows * kRows;
  std::vector<float> g(static_cast<size_t>(padded_rows) * f, 0.0f);
  for (int b = 0; b < batch; ++b) {
    const float* d = dout + static_cast<size_t>(b) * out_dim;
    float* const* dx = dfeatures + static_cast<size_t>(b) * f;
    GatherSample(features, b, batch, f, dim, local.data());
    FillPairGradients(d, f, dim, g.data());
    for (int i0 = 0; i0 < f; i0 += kRows) {
      const float* gi = g.data() + static_cast<size_t>(i0) * f;
      for (int v0 = 0; v0 < vectors; v0 += kChunk) {
        const int chunk =
            kVectors > 0 ? kChunk : std::min(kChunk, vectors - v0);
        __m512 a[kRows][kChunk];
        for (int r = 0; r < kRows; ++r) {
          for (int v = 0; v < kChunk; ++v) a[r][v] = _mm512_setzero_ps();
        }
        for (int j = 0; j < f; ++j) {
          __m512 c[kRows];
          for (int r = 0; r < kRows; ++r) {
            c[r] = _mm512_set1_ps(gi[static_cast<size_t>(r) * f + j]);
          }
          const float* y = local.data() + static_cast<size_t>(j) * dim +
                           static_cast<size_t>(v0) * kLanes512;
          for (int v = 0; v < chunk; ++v) {
            const __m512 yv = _mm512_loadu_ps(y + v * kLanes512);
            for (int r = 0; r < kRows; ++r) {
              a[r][v] = _mm512_fmadd_ps(c[r], yv, a[r][v]);
            }
          }
        }
        for (int r = 0; r < kRows && i0 + r < f; ++r) {
          for (int v = 0; v < chunk; ++v) {
            const int k = (v0 + v) * kLanes512;
            if (i0 + r == 0) {
              a[r][v] = _mm512_add_ps(a[r][v], _mm512_loadu_ps(d + k));
            }
            _mm512_storeu_ps(dx[i0 + r] + k, a[r][v]);
          }
        }
      }
    }
  }
}

}  // namespace

bool HaveAvx512InteractionBackward() {
  static const bool have = __builtin_cpu_supports("avx512f");
  return have;
}

void InteractBackwardAvx512(const float* const* features, const float* dout,
                            int batch, int num_features, int dim,
                            float* const* dfeatures) {
  // Widths WithWidth fixes, in 16-lane vectors (16: one, …, 128: eight).
  WithWidth(dim, [&](auto width) {
    BackwardKernel512<decltype(width)::value / 16>(
        features, dout, batch, num_features, dim, dfeatures);
  });
}

void InteractBackwardAvx2(const float* const* features, const float* dout,
                          int batch, int num_features, int dim,
                          float* const* dfeatures) {
  WithWidth(dim, [&](auto width) {
    BackwardKernel<decltype(width)::value / kLanes>(
        features, dout, batch, num_features, dim, dfeatures);
  });
}

void InteractAvx2(const float* const* features, int batch, int num_features,
                  int dim, float* out) {
  WithWidth(dim, [&](auto width) {
    Kernel<decltype(width)::value / kLanes>(features, batch, num_features, dim,
                                            out);
  });
}

}  // namespace embedps::dense_internal

#endif  // defined(__AVX2__) && defined(__FMA__)
