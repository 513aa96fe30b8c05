#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "dense/cuda/unique_rows_kernels.cuh"

namespace embedps::dense_cuda {
namespace {

constexpr int kThreads = 256;

int ThreadsFor(int work) {
  return work >= 128 ? 128 : (work >= 32 ? work : 32);
}

// One block per bag; threads stride over the dimension. The products are
// rounded before the sum (no fused multiply-add), as the host stages do.
__global__ void PoolUniqueBagsKernel(bool mean, const float* __restrict__ rows,
                                     const int32_t* __restrict__ index,
                                     const float* __restrict__ weights,
                                     const int32_t* __restrict__ offsets,
                                     int dim, int slot, int num_features,
                                     float* __restrict__ features) {
  const int b = blockIdx.x;
  const int32_t begin = offsets[b], end = offsets[b + 1];
  const float scale = mean && end > begin ? 1.0f / (end - begin) : 1.0f;
  float* out =
      features + (static_cast<size_t>(b) * num_features + 1 + slot) * dim;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) {
    float sum = 0.0f;
    for (int32_t r = begin; r < end; ++r) {
      const float v = rows[static_cast<size_t>(index[r]) * dim + k];
      sum += weights == nullptr ? v : __fmul_rn(weights[r], v);
    }
    out[k] = sum * scale;
  }
}

// One thread per bag.
__global__ void KeySourcesKernel(bool mean, const int32_t* __restrict__ offsets,
                                 const float* __restrict__ weights, float scale,
                                 int batch, int slot, int num_features,
                                 int32_t* __restrict__ source,
                                 float* __restrict__ by,
                                 float* __restrict__ unpool) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const int32_t begin = offsets[b], end = offsets[b + 1];
  const float inverse = mean && end > begin ? 1.0f / (end - begin) : 1.0f;
  for (int32_t r = begin; r < end; ++r) {
    source[r] = b * num_features + 1 + slot;
    by[r] = weights == nullptr ? scale : __fmul_rn(scale, weights[r]);
    unpool[r] = inverse;
  }
}

__global__ void IotaKernel(int32_t* __restrict__ out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x) {
    out[i] = i;
  }
}

// First position in sorted[0, n) whose value is >= u.
__device__ int LowerBound(const int32_t* sorted, int n, int32_t u) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (sorted[mid] < u) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One block per unique row; threads stride over the dimension.
__global__ void SumUniqueGradientsKernel(
    const int32_t* __restrict__ sorted_index,
    const int32_t* __restrict__ sorted_position, int keys, int dim,
    const int32_t* __restrict__ source, const float* __restrict__ by,
    const float* __restrict__ unpool, const float* __restrict__ dfeatures,
    float* __restrict__ gradients) {
  const int32_t u = blockIdx.x;
  __shared__ int range[2];
  if (threadIdx.x == 0) {
    range[0] = LowerBound(sorted_index, keys, u);
    range[1] = LowerBound(sorted_index, keys, u + 1);
  }
  __syncthreads();
  float* out = gradients + static_cast<size_t>(u) * dim;
  for (int k = threadIdx.x; k < dim; k += blockDim.x) {
    float sum = 0.0f;
    for (int p = range[0]; p < range[1]; ++p) {
      const int32_t q = sorted_position[p];
      const float g = __fmul_rn(
          dfeatures[static_cast<size_t>(source[q]) * dim + k], unpool[q]);
      sum = __fadd_rn(sum, __fmul_rn(by[q], g));
    }
    out[k] = sum;
  }
}

}  // namespace

void LaunchPoolUniqueBags(bool mean, const float* rows, const int32_t* index,
                          const float* weights, const int32_t* offsets,
                          int batch, int dim, int slot, int num_features,
                          float* features, cudaStream_t stream) {
  if (batch == 0) return;
  PoolUniqueBagsKernel<<<batch, ThreadsFor(dim), 0, stream>>>(
      mean, rows, index, weights, offsets, dim, slot, num_features, features);
}

void LaunchKeySources(bool mean, const int32_t* offsets, const float* weights,
                      float scale, int batch, int slot, int num_features,
                      int32_t* source, float* by, float* unpool,
                      cudaStream_t stream) {
  if (batch == 0) return;
  KeySourcesKernel<<<(batch + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
      mean, offsets, weights, scale, batch, slot, num_features, source, by,
      unpool);
}

void LaunchIota(int32_t* out, int n, cudaStream_t stream) {
  if (n == 0) return;
  const int needed = (n + kThreads - 1) / kThreads;
  const int blocks = needed < 65535 ? needed : 65535;
  IotaKernel<<<blocks, kThreads, 0, stream>>>(out, n);
}

cudaError_t SortPairs(void* temp, size_t& temp_bytes, const int32_t* keys_in,
                      int32_t* keys_out, const int32_t* values_in,
                      int32_t* values_out, int n, int bits,
                      cudaStream_t stream) {
  return cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out,
                                         values_in, values_out, n, 0, bits,
                                         stream);
}

void LaunchSumUniqueGradients(const int32_t* sorted_index,
                              const int32_t* sorted_position, int keys,
                              int rows, int dim, const int32_t* source,
                              const float* by, const float* unpool,
                              const float* dfeatures, float* gradients,
                              cudaStream_t stream) {
  if (rows == 0) return;
  SumUniqueGradientsKernel<<<rows, ThreadsFor(dim), 0, stream>>>(
      sorted_index, sorted_position, keys, dim, source, by, unpool, dfeatures,
      gradients);
}

}  // namespace embedps::dense_cuda
