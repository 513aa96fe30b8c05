// Hashing of feature keys: one mixer for every component, and the shard of
// a key. Pure functions of their inputs, identical on every process, so
// that servers, clients and checkpoints agree on where a key lives.
//
// Thread safety: all functions are pure.
#ifndef EMBEDPS_COMMON_KEY_HASH_H_
#define EMBEDPS_COMMON_KEY_HASH_H_

#include <cstdint>

namespace embedps {

// A bijective 64-bit mixer (the splitmix64 / murmur3 finalizer): every
// input bit affects every output bit. Used so that structured keys (small
// integers, ids with a common prefix) spread evenly.
constexpr uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Mixes two values into one, order-sensitive. Used to derive independent
// streams from (seed, key, index) triples.
constexpr uint64_t MixPair(uint64_t a, uint64_t b) {
  return Mix64(a ^ Mix64(b + 0x9e3779b97f4a7c15ULL));
}

// Lamping & Veach's jump consistent hash: maps `hash` to a bucket in
// [0, num_buckets). Growing n to n+1 moves only 1/(n+1) of the keys.
// REQUIRES: num_buckets >= 1.
inline int32_t JumpConsistentHash(uint64_t hash, int32_t num_buckets) {
  int64_t bucket = -1;
  int64_t next = 0;
  while (next < num_buckets) {
    bucket = next;
    hash = hash * 2862933555777941757ULL + 1;
    next = static_cast<int64_t>(static_cast<double>(bucket + 1) *
                                (static_cast<double>(1LL << 31) /
                                 static_cast<double>((hash >> 33) + 1)));
  }
  return static_cast<int32_t>(bucket);
}

// The shard that owns `key` among `num_shards` servers.
// REQUIRES: num_shards >= 1.
inline int32_t ShardOfKey(uint64_t key, int32_t num_shards) {
  return JumpConsistentHash(Mix64(key), num_shards);
}

}  // namespace embedps

#endif  // EMBEDPS_COMMON_KEY_HASH_H_
