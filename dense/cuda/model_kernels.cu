#include <cstdint>

#include "dense/cuda/model_kernels.cuh"

namespace embedps::dense_cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(size_t n) {
  const size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < 65535 * 32 ? blocks : 65535 * 32);
}

__global__ void BroadcastRowsKernel(const float* __restrict__ bias, int rows,
                                    int cols, float* __restrict__ z) {
  const size_t n = static_cast<size_t>(rows) * cols;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    z[i] = bias[i % cols];
  }
}

__global__ void ReluKernel(float* __restrict__ z, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    z[i] = z[i] > 0.0f ? z[i] : 0.0f;
  }
}

__global__ void ReluBackwardKernel(const float* __restrict__ activation,
                                   size_t n, float* __restrict__ delta) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    if (!(activation[i] > 0.0f)) delta[i] = 0.0f;
  }
}

__global__ void CopyFeatureZeroKernel(float* z0, float* features, int batch,
                                      int num_features, int dim,
                                      bool to_features) {
  const size_t n = static_cast<size_t>(batch) * dim;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t b = i / dim, k = i % dim;
    float* f = features + b * num_features * dim + k;
    if (to_features) {
      *f = z0[i];
    } else {
      z0[i] = *f;
    }
  }
}

// One block per sample; threads stride over the dimension.
__global__ void PoolBagsKernel(bool mean, const float* __restrict__ rows,
                               const int32_t* __restrict__ offsets, int dim,
                               int slot, int num_features,
                               float* __restrict__ features) {
  const int b = blockIdx.x;
  const int32_t begin = offsets[b], end = offsets[b + 1];
  const float scale = mean && end > begin ? 1.0f / (end - begin) : 1.0f;
  float* out =
      features + (static_cast<size_t>(b) * num_features + 1 + slot) * dim;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) {
    float sum = 0.0f;
    for (int32_t r = begin; r < end; ++r) {
      sum += rows[static_cast<size_t>(r) * dim + k];
    }
    out[k] = sum * scale;
  }
}

__global__ void UnpoolBagsKernel(bool mean, const float* __restrict__ dfeatures,
                                 const int32_t* __restrict__ offsets, int dim,
                                 int slot, int num_features,
                                 float* __restrict__ row_gradients) {
  const int b = blockIdx.x;
  const int32_t begin = offsets[b], end = offsets[b + 1];
  const float scale = mean && end > begin ? 1.0f / (end - begin) : 1.0f;
  const float* g =
      dfeatures + (static_cast<size_t>(b) * num_features + 1 + slot) * dim;
  for (int32_t r = begin; r < end; ++r) {
    for (int k = threadIdx.x; k < dim; k += blockDim.x) {
      row_gradients[static_cast<size_t>(r) * dim + k] = g[k] * scale;
    }
  }
}

// Index of pair (i, j), i < j, in the i-major order of the interaction
// output (after the dim copied values of feature 0).
__device__ int PairIndex(int i, int j, int num_features) {
  return i * (num_features - 1) - i * (i - 1) / 2 + (j - i - 1);
}

// One block per sample; threads stride over the output.
__global__ void InteractKernel(const float* __restrict__ features,
                               int num_features, int dim,
                               float* __restrict__ out) {
  const int b = blockIdx.x;
  const int pairs = num_features * (num_features - 1) / 2;
  const float* f = features + static_cast<size_t>(b) * num_features * dim;
  float* o = out + static_cast<size_t>(b) * (dim + pairs);
  for (int k = threadIdx.x; k < dim; k += blockDim.x) o[k] = f[k];
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    // Recover (i, j) from p: walk the rows (F is small, tens at most).
    int i = 0, rest = p;
    while (rest >= num_features - 1 - i) {
      rest -= num_features - 1 - i;
      ++i;
    }
    const int j = i + 1 + rest;
    const float* fi = f + static_cast<size_t>(i) * dim;
    const float* fj = f + static_cast<size_t>(j) * dim;
    float dot = 0.0f;
    for (int k = 0; k < dim; ++k) dot += fi[k] * fj[k];
    o[dim + p] = dot;
  }
}

// One block per sample; one thread per feature element (i, k):
// d f_i[k] = Σ_{j≠i} g(i, j) f_j[k] (+ dout[k] for i = 0).
__global__ void InteractBackwardKernel(const float* __restrict__ features,
                                       const float* __restrict__ dout,
                                       int num_features, int dim,
                                       float* __restrict__ dfeatures) {
  const int b = blockIdx.x;
  const int pairs = num_features * (num_features - 1) / 2;
  const float* f = features + static_cast<size_t>(b) * num_features * dim;
  const float* g = dout + static_cast<size_t>(b) * (dim + pairs);
  float* df = dfeatures + static_cast<size_t>(b) * num_features * dim;
  for (int e = threadIdx.x; e < num_features * dim; e += blockDim.x) {
    const int i = e / dim, k = e % dim;
    float sum = i == 0 ? g[k] : 0.0f;
    for (int j = 0; j < num_features; ++j) {
      if (j == i) continue;
      const int p =
          i < j ? PairIndex(i, j, num_features) : PairIndex(j, i, num_features);
      sum += g[dim + p] * f[static_cast<size_t>(j) * dim + k];
    }
    df[e] = sum;
  }
}

__global__ void BinaryCrossEntropyKernel(const float* __restrict__ logits,
                                         const float* __restrict__ labels,
                                         int batch, float* __restrict__ losses,
                                         float* __restrict__ dlogits) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  const float z = logits[r], y = labels[r];
  const float e = expf(-fabsf(z));
  losses[r] = fmaxf(z, 0.0f) - z * y + log1pf(e);
  const float sigmoid = z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
  dlogits[r] = (sigmoid - y) / static_cast<float>(batch);
}

int ThreadsFor(int work) {
  return work >= 128 ? 128 : (work >= 32 ? work : 32);
}

// DCN-v2's cross layer, elementwise: y = x0 ⊙ u + x.
__global__ void CrossCombineKernel(const float* __restrict__ x0,
                                   const float* __restrict__ u,
                                   const float* __restrict__ x, size_t n,
                                   float* __restrict__ y) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    y[i] = x0[i] * u[i] + x[i];
  }
}

// du = g ⊙ x0 and, with dx0_sum, dx0_sum += g ⊙ u.
__global__ void CrossBackwardKernel(const float* __restrict__ g,
                                    const float* __restrict__ x0,
                                    const float* __restrict__ u, size_t n,
                                    float* __restrict__ du,
                                    float* __restrict__ dx0_sum) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    du[i] = g[i] * x0[i];
    if (dx0_sum != nullptr) dx0_sum[i] += g[i] * u[i];
  }
}

}  // namespace

void LaunchBroadcastRows(const float* bias, int rows, int cols, float* z,
                         cudaStream_t stream) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return;
  BroadcastRowsKernel<<<Blocks(n), kThreads, 0, stream>>>(bias, rows, cols, z);
}

void LaunchRelu(float* z, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  ReluKernel<<<Blocks(n), kThreads, 0, stream>>>(z, n);
}

void LaunchReluBackward(const float* activation, size_t n, float* delta,
                        cudaStream_t stream) {
  if (n == 0) return;
  ReluBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(activation, n, delta);
}

void LaunchCopyFeatureZero(float* z0, float* features, int batch,
                           int num_features, int dim, bool to_features,
                           cudaStream_t stream) {
  const size_t n = static_cast<size_t>(batch) * dim;
  if (n == 0) return;
  CopyFeatureZeroKernel<<<Blocks(n), kThreads, 0, stream>>>(
      z0, features, batch, num_features, dim, to_features);
}

void LaunchPoolBags(bool mean, const float* rows, const int32_t* offsets,
                    int batch, int dim, int slot, int num_features,
                    float* features, cudaStream_t stream) {
  if (batch == 0) return;
  PoolBagsKernel<<<batch, ThreadsFor(dim), 0, stream>>>(
      mean, rows, offsets, dim, slot, num_features, features);
}

void LaunchUnpoolBags(bool mean, const float* dfeatures, const int32_t* offsets,
                      int batch, int dim, int slot, int num_features,
                      float* row_gradients, cudaStream_t stream) {
  if (batch == 0) return;
  UnpoolBagsKernel<<<batch, ThreadsFor(dim), 0, stream>>>(
      mean, dfeatures, offsets, dim, slot, num_features, row_gradients);
}

void LaunchInteract(const float* features, int batch, int num_features, int dim,
                    float* out, cudaStream_t stream) {
  if (batch == 0) return;
  const int pairs = num_features * (num_features - 1) / 2;
  InteractKernel<<<batch, ThreadsFor(pairs > dim ? pairs : dim), 0, stream>>>(
      features, num_features, dim, out);
}

void LaunchInteractBackward(const float* features, const float* dout, int batch,
                            int num_features, int dim, float* dfeatures,
                            cudaStream_t stream) {
  if (batch == 0) return;
  InteractBackwardKernel<<<batch, ThreadsFor(num_features * dim), 0, stream>>>(
      features, dout, num_features, dim, dfeatures);
}

void LaunchBinaryCrossEntropy(const float* logits, const float* labels,
                              int batch, float* losses, float* dlogits,
                              cudaStream_t stream) {
  if (batch == 0) return;
  BinaryCrossEntropyKernel<<<(batch + kThreads - 1) / kThreads, kThreads, 0,
                             stream>>>(logits, labels, batch, losses, dlogits);
}

void LaunchCrossCombine(const float* x0, const float* u, const float* x,
                        size_t n, float* y, cudaStream_t stream) {
  if (n == 0) return;
  CrossCombineKernel<<<Blocks(n), kThreads, 0, stream>>>(x0, u, x, n, y);
}

void LaunchCrossBackward(const float* g, const float* x0, const float* u,
                         size_t n, float* du, float* dx0_sum,
                         cudaStream_t stream) {
  if (n == 0) return;
  CrossBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(g, x0, u, n, du,
                                                          dx0_sum);
}

}  // namespace embedps::dense_cuda
