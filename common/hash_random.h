// Random numbers as pure functions of (seed, index): bit-identical on every
// machine, rank and run, unlike <random>'s distributions. Used wherever a
// value must be reproducible from its coordinates alone — initial
// embedding rows, dense initializations, synthetic and planted data.
//
// Thread safety: all functions are pure.
#ifndef EMBEDPS_COMMON_HASH_RANDOM_H_
#define EMBEDPS_COMMON_HASH_RANDOM_H_

#include <cmath>
#include <cstdint>

#include "common/key_hash.h"

namespace embedps {

// The top 53 bits of `bits` as a double in (0, 1): never 0 or 1, so log()
// of it is finite.
constexpr double OpenUnitDouble(uint64_t bits) {
  return (static_cast<double>(bits >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

// A uniform double in (0, 1) from (seed, index).
constexpr double HashUnit(uint64_t seed, uint64_t index) {
  return OpenUnitDouble(MixPair(seed, index));
}

// A standard normal from (seed, index), by Box–Muller over the uniforms
// at indices 2·index and 2·index + 1.
inline double HashNormal(uint64_t seed, uint64_t index) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const double radius = std::sqrt(-2.0 * std::log(HashUnit(seed, 2 * index)));
  return radius * std::cos(kTwoPi * HashUnit(seed, 2 * index + 1));
}

}  // namespace embedps

#endif  // EMBEDPS_COMMON_HASH_RANDOM_H_
