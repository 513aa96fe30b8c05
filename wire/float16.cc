#include "wire/float16.h"

#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace embedps::wire {
namespace float16_internal {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace

// Rounding by float arithmetic for subnormal halves, and by integer
// arithmetic with a round-to-nearest-even bias for normal ones.
uint16_t PortableFloatToHalf(float value) {
  constexpr uint32_t kInfinity = 255u << 23;
  constexpr uint32_t kHalfOverflow = (127u + 16) << 23;  // 2^16
  constexpr uint32_t kSubnormalMagic = ((127u - 15) + (23 - 10) + 1) << 23;
  uint32_t bits = Bits(value);
  const uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  uint32_t half;
  if (bits >= kHalfOverflow) {
    // Inf stays inf, NaN becomes a quiet NaN, finite overflow becomes inf
    // (everything at or above 65520 rounds past the largest half, 65504).
    half = bits > kInfinity ? 0x7e00u : 0x7c00u;
  } else if (bits < (113u << 23)) {
    // Below 2^-14: a subnormal half (or zero). Adding the magic number makes
    // the FPU round the mantissa into place.
    const float rounded = FromBits(bits) + FromBits(kSubnormalMagic);
    half = Bits(rounded) - kSubnormalMagic;
  } else {
    const uint32_t mantissa_odd = (bits >> 13) & 1;
    bits += ((15u - 127u) << 23) + 0xfffu;  // rebias exponent, round
    bits += mantissa_odd;                   // ties to even
    half = bits >> 13;
  }
  return static_cast<uint16_t>(half | (sign >> 16));
}

float PortableHalfToFloat(uint16_t half) {
  constexpr uint32_t kShiftedExponent = 0x7c00u << 13;
  uint32_t bits = (half & 0x7fffu) << 13;
  const uint32_t exponent = kShiftedExponent & bits;
  bits += (127u - 15u) << 23;
  if (exponent == kShiftedExponent) {
    bits += (128u - 16u) << 23;  // inf or NaN
  } else if (exponent == 0) {
    bits += 1u << 23;  // subnormal: renormalise by float arithmetic
    bits = Bits(FromBits(bits) - FromBits(113u << 23));
  }
  return FromBits(bits | (static_cast<uint32_t>(half & 0x8000u) << 16));
}

}  // namespace float16_internal

uint16_t FloatToHalf(float value) {
#if defined(__F16C__)
  return static_cast<uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT));
#else
  return float16_internal::PortableFloatToHalf(value);
#endif
}

float HalfToFloat(uint16_t half) {
#if defined(__F16C__)
  return _cvtsh_ss(half);
#else
  return float16_internal::PortableHalfToFloat(half);
#endif
}

void FloatsToHalves(absl::Span<const float> in, uint16_t* out) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= in.size(); i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in.data() + i),
                                      _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
#endif
  for (; i < in.size(); ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(absl::Span<const uint16_t> in, float* out) {
  size_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= in.size(); i += 8) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(in.data() + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
#endif
  for (; i < in.size(); ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace embedps::wire
