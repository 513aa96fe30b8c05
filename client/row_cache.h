// RowCache: the serving client's hot-key cache. Rows of (table, key),
// least recently used out first, each usable for at most a TTL after it
// was put.
//
// Rows live in fixed entries chained in an LRU list by index (no
// allocation once the cache is full: an evicted entry is reused, its
// buffer too when the dim matches). The cache is split into shards by key
// hash, each with its own lock, so that request threads rarely wait on
// one another; each shard holds capacity / shards rows.
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_CLIENT_ROW_CACHE_H_
#define EMBEDPS_CLIENT_ROW_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace embedps::client {

class RowCache {
 public:
  // `rows` in all (at least one a shard); each usable for `ttl`.
  RowCache(size_t rows, absl::Duration ttl);

  // Copies the row of (table, key) into out[0, dim) if it is held, has
  // `dim` floats and was put less than the TTL before `now`; marks it
  // used; *version (if given): the version the row was put with. `table`
  // identifies the table (e.g. a hash of its name).
  bool Get(uint64_t table, uint64_t key, float* out, size_t dim, absl::Time now,
           uint64_t* version = nullptr);

  // Keeps a copy of row[0, dim) as (table, key)'s, read from `version` and
  // put at `now`; the least recently used row of its shard goes if the
  // shard is full.
  void Put(uint64_t table, uint64_t key, const float* row, size_t dim,
           absl::Time now, uint64_t version);

  // Rows held.
  size_t size() const;

 private:
  struct Key {
    uint64_t table;
    uint64_t key;
    bool operator==(const Key& o) const {
      return table == o.table && key == o.key;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.table, k.key);
    }
  };
  struct Entry {
    Key key;
    absl::Time put;
    uint64_t version = 0;
    int32_t prev = -1, next = -1;  // toward the most / least recently used
    std::vector<float> row;
  };
  struct Shard {
    mutable Mutex mu;
    std::vector<Entry> entries ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<Key, int32_t> index ABSL_GUARDED_BY(mu);
    int32_t head ABSL_GUARDED_BY(mu) = -1;          // most recently used
    int32_t tail ABSL_GUARDED_BY(mu) = -1;          // least recently used
    std::vector<int32_t> free ABSL_GUARDED_BY(mu);  // entries not in use
  };
  static void Unlink(Shard& shard, int32_t e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  static void PushFront(Shard& shard, int32_t e)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(shard.mu);
  Shard& ShardOf(const Key& key);

  const size_t per_shard_;
  const absl::Duration ttl_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_ROW_CACHE_H_
