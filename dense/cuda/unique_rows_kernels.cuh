// The device half of a UniqueRowsBatch step (dense/unique_rows.h): bags
// pooled straight from their tables' unique rows, and the per-key row
// gradients summed per unique row in (slot, key) order, so that the sums
// equal the host stages' bit for bit when the inputs are equal. Every
// pointer is device memory; launches are asynchronous on `stream`.
#ifndef EMBEDPS_DENSE_CUDA_UNIQUE_ROWS_KERNELS_CUH_
#define EMBEDPS_DENSE_CUDA_UNIQUE_ROWS_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace embedps::dense_cuda {

// features[b, 1 + slot, :] = Σ over keys r of bag b (offsets) of
// weight(r) × rows[index[r], :], ÷ the bag's size for mean. `weights` may
// be null (all 1).
void LaunchPoolUniqueBags(bool mean, const float* rows, const int32_t* index,
                          const float* weights, const int32_t* offsets,
                          int batch, int dim, int slot, int num_features,
                          float* features, cudaStream_t stream);

// For every key r of one slot's bags: source[r] = the row of dfeatures its
// gradient comes from (b × num_features + 1 + slot), by[r] = scale ×
// weight(r), unpool[r] = 1 / the bag's size for mean, else 1.
void LaunchKeySources(bool mean, const int32_t* offsets, const float* weights,
                      float scale, int batch, int slot, int num_features,
                      int32_t* source, float* by, float* unpool,
                      cudaStream_t stream);

// out[i] = i for i < n.
void LaunchIota(int32_t* out, int n, cudaStream_t stream);

// A stable sort of (keys, values) by the low `bits` bits of the keys
// (cub::DeviceRadixSort). With temp == null, sets temp_bytes to the
// scratch it needs and does nothing else.
cudaError_t SortPairs(void* temp, size_t& temp_bytes, const int32_t* keys_in,
                      int32_t* keys_out, const int32_t* values_in,
                      int32_t* values_out, int n, int bits,
                      cudaStream_t stream);

// For every unique row u < rows: gradients[u, :] = Σ over the positions p
// with sorted_index[p] == u, in order, of by[q] × (dfeatures[source[q], :]
// × unpool[q]) with q = sorted_position[p]; 0 where none.
void LaunchSumUniqueGradients(const int32_t* sorted_index,
                              const int32_t* sorted_position, int keys,
                              int rows, int dim, const int32_t* source,
                              const float* by, const float* unpool,
                              const float* dfeatures, float* gradients,
                              cudaStream_t stream);

}  // namespace embedps::dense_cuda

#endif  // EMBEDPS_DENSE_CUDA_UNIQUE_ROWS_KERNELS_CUH_
