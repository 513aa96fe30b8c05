// The CUDA kernels of the dense model, as host launchers on a stream (the
// math of dense/internal/cpu_layers.h, on device memory). Every pointer is
// device memory; launches are asynchronous and report errors through
// cudaGetLastError / the next synchronizing call.
#ifndef EMBEDPS_DENSE_CUDA_MODEL_KERNELS_CUH_
#define EMBEDPS_DENSE_CUDA_MODEL_KERNELS_CUH_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace embedps::dense_cuda {

// z[r, c] = bias[c] for rows × cols.
void LaunchBroadcastRows(const float* bias, int rows, int cols, float* z,
                         cudaStream_t stream);

// z = max(z, 0) over n values.
void LaunchRelu(float* z, size_t n, cudaStream_t stream);

// delta[i] = 0 where activation[i] <= 0.
void LaunchReluBackward(const float* activation, size_t n, float* delta,
                        cudaStream_t stream);

// features[b, 0, :] = z0[b, :] (to = true) or z0[b, :] = features[b, 0, :].
void LaunchCopyFeatureZero(float* z0, float* features, int batch,
                           int num_features, int dim, bool to_features,
                           cudaStream_t stream);

// features[b, 1 + slot, :] = sum (mean: average) of rows[offsets[b] ..
// offsets[b+1]).
void LaunchPoolBags(bool mean, const float* rows, const int32_t* offsets,
                    int batch, int dim, int slot, int num_features,
                    float* features, cudaStream_t stream);

// row_gradients[k] = dfeatures[b, 1 + slot] (÷ bag size for mean) for each
// row k of bag b.
void LaunchUnpoolBags(bool mean, const float* dfeatures, const int32_t* offsets,
                      int batch, int dim, int slot, int num_features,
                      float* row_gradients, cudaStream_t stream);

// out[b] = [features[b, 0, :], <f_i, f_j> for i < j, i-major].
void LaunchInteract(const float* features, int batch, int num_features, int dim,
                    float* out, cudaStream_t stream);

// dfeatures from dout (d loss / d out).
void LaunchInteractBackward(const float* features, const float* dout, int batch,
                            int num_features, int dim, float* dfeatures,
                            cudaStream_t stream);

// Per sample: losses[r] = BCE(sigmoid(logit), label) from the logit, and
// dlogits[r] = (sigmoid(logit) - label) / batch.
void LaunchBinaryCrossEntropy(const float* logits, const float* labels,
                              int batch, float* losses, float* dlogits,
                              cudaStream_t stream);

// DCN-v2's cross layer (dense/internal/cpu_cross.h), elementwise over n
// values: y = x0 ⊙ u + x (u = x Wᵀ + b from cuBLAS).
void LaunchCrossCombine(const float* x0, const float* u, const float* x,
                        size_t n, float* y, cudaStream_t stream);

// Its backward, elementwise: du = g ⊙ x0 (g = d loss / d y) and, when
// dx0_sum is not null, dx0_sum += g ⊙ u.
void LaunchCrossBackward(const float* g, const float* x0, const float* u,
                         size_t n, float* du, float* dx0_sum,
                         cudaStream_t stream);

}  // namespace embedps::dense_cuda

#endif  // EMBEDPS_DENSE_CUDA_MODEL_KERNELS_CUH_
