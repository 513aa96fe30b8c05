// The elementwise rule of one dense optimizer step (dense_optimizer.h),
// shared by the host's loops and the CUDA kernel (dense/cuda/
// dense_optimizer_kernels.cu): one definition of the arithmetic, so that
// both backends apply the same operations in the same order to every
// parameter. Header-only; compiles as host code and, under nvcc, as host
// and device code.
//
// Thread safety: pure functions.
#ifndef EMBEDPS_DENSE_DENSE_UPDATE_H_
#define EMBEDPS_DENSE_DENSE_UPDATE_H_

#include <cmath>

#if defined(__CUDACC__)
#define EMBEDPS_HOST_DEVICE __host__ __device__
#else
#define EMBEDPS_HOST_DEVICE
#endif

namespace embedps::dense {

// One step's constants: what the spec and the step count make of it.
struct DenseStepRule {
  enum class Kind { kSgd, kSgdMomentum, kAdam, kAdamW };
  Kind kind = Kind::kSgd;
  float learning_rate = 0;
  float momentum = 0;  // kSgdMomentum
  // kAdam, kAdamW: the moments' rates, ε, the bias corrections 1 − βᵗ;
  // kAdamW: the decoupled weight decay lr·λ.
  float beta1 = 0, beta2 = 0, epsilon = 0;
  float bias1 = 1, bias2 = 1;
  float decay = 0;
};

// p -= lr·g
EMBEDPS_HOST_DEVICE inline void SgdUpdate(const DenseStepRule& r, float& p,
                                          float g) {
  p -= r.learning_rate * g;
}

// v = μ·v + g; p -= lr·v
EMBEDPS_HOST_DEVICE inline void SgdMomentumUpdate(const DenseStepRule& r,
                                                  float& p, float g, float& v) {
  v = r.momentum * v + g;
  p -= r.learning_rate * v;
}

// m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
// p -= lr·(m/(1−β1ᵗ)) / (√(v/(1−β2ᵗ)) + ε)
EMBEDPS_HOST_DEVICE inline void AdamUpdate(const DenseStepRule& r, float& p,
                                           float g, float& m, float& v) {
  m = r.beta1 * m + (1.0f - r.beta1) * g;
  v = r.beta2 * v + (1.0f - r.beta2) * (g * g);
#if defined(__CUDA_ARCH__)
  const float root = sqrtf(v / r.bias2);
#else
  const float root = std::sqrt(v / r.bias2);
#endif
  p -= r.learning_rate * (m / r.bias1) / (root + r.epsilon);
}

// p -= lr·λ·p (Loshchilov & Hutter: before the Adam step), then Adam.
EMBEDPS_HOST_DEVICE inline void AdamWUpdate(const DenseStepRule& r, float& p,
                                            float g, float& m, float& v) {
  p -= r.decay * p;
  AdamUpdate(r, p, g, m, v);
}

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_DENSE_UPDATE_H_
