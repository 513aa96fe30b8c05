// The interaction's forward and backward passes for float features in AVX2 +
// FMA registers (builds for x86-64-v3 and above; cpu_layers.cc falls back to
// its portable kernels elsewhere, for float64 and for widths that are not
// a multiple of 8).
//
// Forward, each dot product <f_i, f_j> is summed over its 8 lanes (k mod
// 8) first and the lanes added in a fixed tree at the end: the result is
// the same for every batch, thread split and call, but not bit for bit the
// sum in k order (float rounding; the tests hold it to float64's within
// float rounding). Backward, d f_i sums g_ij f_j in j order with fused
// multiply-adds. Thread safety: pure functions.
#ifndef EMBEDPS_DENSE_INTERNAL_INTERACTION_X86_H_
#define EMBEDPS_DENSE_INTERNAL_INTERACTION_X86_H_

namespace embedps::dense_internal {

// Whether this build has InteractAvx2.
constexpr bool kHaveAvx2Interaction =
#if defined(__AVX2__) && defined(__FMA__)
    true;
#else
    false;
#endif

// As Interact<float> (cpu_layers.h): out[b] = [f_0, <f_i, f_j> for i < j].
// REQUIRES: kHaveAvx2Interaction, dim % 8 == 0, num_features >= 1.
void InteractAvx2(const float* const* features, int batch, int num_features,
                  int dim, float* out);

// As InteractBackward<float>: d loss / d f_i into dfeatures[b·F + i].
// REQUIRES: as InteractAvx2.
void InteractBackwardAvx2(const float* const* features, const float* dout,
                          int batch, int num_features, int dim,
                          float* const* dfeatures);

// Whether this machine (checked at run time) runs InteractBackwardAvx512.
// REQUIRES: kHaveAvx2Interaction (the build's x86 kernels).
bool HaveAvx512InteractionBackward();

// InteractBackwardAvx2 in AVX-512 registers, four result rows at a time:
// bit for bit the same results (each element the same fused multiply-add
// chain), ~1.5× as fast where the machine has AVX-512 (model_benchmark
// --sections=interaction). REQUIRES: HaveAvx512InteractionBackward(),
// dim % 16 == 0, num_features >= 1.
void InteractBackwardAvx512(const float* const* features, const float* dout,
                            int batch, int num_features, int dim,
                            float* const* dfeatures);

}  // namespace embedps::dense_internal

#endif  // EMBEDPS_DENSE_INTERNAL_INTERACTION_X86_H_
