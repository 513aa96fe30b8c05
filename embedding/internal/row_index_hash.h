// How the table's row index hashes a key, and the fingerprint each index
// slot keeps: shared by embedding/table.cc and the tests that need keys
// whose fingerprints collide.
#ifndef EMBEDPS_EMBEDDING_INTERNAL_ROW_INDEX_HASH_H_
#define EMBEDPS_EMBEDDING_INTERNAL_ROW_INDEX_HASH_H_

#include <cstdint>

#include "common/key_hash.h"

namespace embedps::embedding_internal {

// Salt that makes the table's key hash independent of the shard routing
// hash (Mix64(key)), so keys of one shard still spread over all stripes.
constexpr uint64_t kTableHashSalt = 0x2545f4914f6cdd1dULL;

// The hash a table computes once per key: the stripe takes its top bits,
// absl's index its low ones.
constexpr uint64_t TableKeyHash(uint64_t key) {
  return Mix64(key + kTableHashSalt);
}

// The lock stripe of a key of hash `hash`: stripes take the hash's top
// bits; absl's index uses the low ones.
constexpr uint32_t StripeIndexOfHash(uint64_t hash, uint32_t stripe_mask) {
  return static_cast<uint32_t>(hash >> 52) & stripe_mask;
}

// 8 bits of `hash` remixed by a multiply, so that they are independent of
// the bits absl and the stripes use. An index slot keeps them next to the
// row id: a lookup tells most other keys apart without reading their rows.
constexpr uint8_t IndexFingerprint(uint64_t hash) {
  return static_cast<uint8_t>((hash * 0x9E3779B97F4A7C15ULL) >> 56);
}

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_ROW_INDEX_HASH_H_
