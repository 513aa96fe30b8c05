#include "client/row_cache.h"

#include <algorithm>
#include <cstring>

#include "common/key_hash.h"

namespace embedps::client {
namespace {

constexpr size_t kShards = 64;

}  // namespace

RowCache::RowCache(size_t rows, absl::Duration ttl)
    : per_shard_(std::max<size_t>(1, rows / kShards)),
      ttl_(ttl),
      shards_(new Shard[kShards]) {}

RowCache::Shard& RowCache::ShardOf(const Key& key) {
  return shards_[Mix64(key.key ^ key.table) % kShards];
}

void RowCache::Unlink(Shard& shard, int32_t e) {
  Entry& entry = shard.entries[e];
  if (entry.prev >= 0) {
    shard.entries[entry.prev].next = entry.next;
  } else {
    shard.head = entry.next;
  }
  if (entry.next >= 0) {
    shard.entries[entry.next].prev = entry.prev;
  } else {
    shard.tail = entry.prev;
  }
  entry.prev = entry.next = -1;
}

void RowCache::PushFront(Shard& shard, int32_t e) {
  Entry& entry = shard.entries[e];
  entry.prev = -1;
  entry.next = shard.head;
  if (shard.head >= 0) shard.entries[shard.head].prev = e;
  shard.head = e;
  if (shard.tail < 0) shard.tail = e;
}

bool RowCache::Get(uint64_t table, uint64_t key, float* out, size_t dim,
                   absl::Time now, uint64_t* version) {
  const Key k{table, key};
  Shard& shard = ShardOf(k);
  MutexLock lock(&shard.mu);
  auto it = shard.index.find(k);
  if (it == shard.index.end()) return false;
  const int32_t e = it->second;
  Entry& entry = shard.entries[e];
  if (now - entry.put >= ttl_ || entry.row.size() != dim) {
    Unlink(shard, e);
    shard.index.erase(it);
    shard.free.push_back(e);
    return false;
  }
  if (shard.head != e) {
    Unlink(shard, e);
    PushFront(shard, e);
  }
  std::memcpy(out, entry.row.data(), dim * sizeof(float));
  if (version != nullptr) *version = entry.version;
  return true;
}

void RowCache::Put(uint64_t table, uint64_t key, const float* row, size_t dim,
                   absl::Time now, uint64_t version) {
  const Key k{table, key};
  Shard& shard = ShardOf(k);
  MutexLock lock(&shard.mu);
  int32_t e;
  if (auto it = shard.index.find(k); it != shard.index.end()) {
    e = it->second;
    Unlink(shard, e);
  } else if (!shard.free.empty()) {
    e = shard.free.back();
    shard.free.pop_back();
    shard.index.emplace(k, e);
  } else if (shard.entries.size() < per_shard_) {
    e = static_cast<int32_t>(shard.entries.size());
    shard.entries.emplace_back();
    shard.index.emplace(k, e);
  } else {
    e = shard.tail;  // the least recently used goes
    Unlink(shard, e);
    shard.index.erase(shard.entries[e].key);
    shard.index.emplace(k, e);
  }
  Entry& entry = shard.entries[e];
  entry.key = k;
  entry.put = now;
  entry.version = version;
  entry.row.assign(row, row + dim);
  PushFront(shard, e);
}

size_t RowCache::size() const {
  size_t n = 0;
  for (size_t s = 0; s < kShards; ++s) {
    MutexLock lock(&shards_[s].mu);
    n += shards_[s].index.size();
  }
  return n;
}

}  // namespace embedps::client
