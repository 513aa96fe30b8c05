#include "embedding/initializer.h"

#include <algorithm>
#include <cmath>

#include "common/hash_random.h"
#include "common/key_hash.h"

namespace embedps::embedding {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
// Truncated normals redraw beyond this many standard deviations.
constexpr double kTruncationSigmas = 2.0;

// A standard normal draw by Box–Muller from one 64-bit hash of
// (seed, key, element, attempt).
double StandardNormal(uint64_t seed, uint64_t key, uint64_t element,
                      uint64_t attempt) {
  const uint64_t stream = MixPair(MixPair(seed, key), element * 64 + attempt);
  const double u1 = OpenUnitDouble(stream);
  const double u2 = OpenUnitDouble(Mix64(stream ^ 0x5851f42d4c957f2dULL));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

}  // namespace

float UniformUnit(uint64_t seed, uint64_t key, uint64_t index) {
  const uint64_t bits = MixPair(MixPair(seed, key), index);
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

void InitialRow(const InitializerSpec& init, uint64_t seed, uint64_t key,
                absl::Span<float> out) {
  switch (init.kind) {
    case InitializerSpec::Kind::kZeros:
      std::fill(out.begin(), out.end(), 0.0f);
      return;
    case InitializerSpec::Kind::kConstant:
      std::fill(out.begin(), out.end(), init.value);
      return;
    case InitializerSpec::Kind::kUniform: {
      const uint64_t row_seed = MixPair(seed, key);
      const double low = init.low;
      const double width = static_cast<double>(init.high) - init.low;
      for (size_t i = 0; i < out.size(); ++i) {
        const double u = static_cast<double>(MixPair(row_seed, i) >> 40) *
                         (1.0 / 16777216.0);
        // Rounding to float can reach `high` for a narrow range; clamp so
        // the interval stays half-open.
        float v = static_cast<float>(low + width * u);
        if (v >= init.high) v = std::nextafter(init.high, init.low);
        out[i] = v;
      }
      return;
    }
    case InitializerSpec::Kind::kNormal:
      for (size_t i = 0; i < out.size(); ++i) {
        double z = StandardNormal(seed, key, i, 0);
        // Redraw (deterministically) until inside the truncation bound;
        // P(|z| > 2) = 4.6%, so 64 attempts fail with probability 1e-85.
        for (uint64_t attempt = 1;
             init.truncated && std::abs(z) > kTruncationSigmas && attempt < 64;
             ++attempt) {
          z = StandardNormal(seed, key, i, attempt);
        }
        if (init.truncated) {
          z = std::clamp(z, -kTruncationSigmas, kTruncationSigmas);
        }
        out[i] = static_cast<float>(init.mean + init.stddev * z);
      }
      return;
  }
}

}  // namespace embedps::embedding
