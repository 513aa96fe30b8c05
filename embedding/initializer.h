// Initial rows: a pure function of (table seed, key, element index).
//
// The same key gets the same initial row on any shard, replica, restart or
// machine (integer hashing, then float64 math from glibc rounded to float),
// so an unadmitted key can be answered without storing anything.
//
// Thread safety: pure functions.
#ifndef EMBEDPS_EMBEDDING_INITIALIZER_H_
#define EMBEDPS_EMBEDDING_INITIALIZER_H_

#include <cstdint>

#include "absl/types/span.h"
#include "embedding/table_spec.h"

namespace embedps::embedding {

// Writes the initial row of `key` into `out` (out.size() elements).
// REQUIRES: ValidateTableSpec accepted a spec holding `init`.
void InitialRow(const InitializerSpec& init, uint64_t seed, uint64_t key,
                absl::Span<float> out);

// A float in [0, 1) with 24 random bits: the uniform draw number `index`
// of (seed, key). Exposed for tests of the distribution.
float UniformUnit(uint64_t seed, uint64_t key, uint64_t index);

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_INITIALIZER_H_
