#include "client/serving_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <list>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/key_hash.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/embedps.grpc.pb.h"
#include "wire/float16.h"
#include "wire/grpc_status.h"

namespace embedps::client {
namespace {

constexpr int kCacheShards = 16;

// A table's key: the table's name hashed with the key.
struct RowKey {
  uint64_t table;
  uint64_t key;
  bool operator==(const RowKey& o) const {
    return table == o.table && key == o.key;
  }
  template <typename H>
  friend H AbslHashValue(H h, const RowKey& k) {
    return H::combine(std::move(h), k.table, k.key);
  }
};

// LRU with a TTL, in shards with a lock each.
class RowCache {
 public:
  RowCache(size_t rows, absl::Duration ttl)
      : per_shard_(std::max<size_t>(1, rows / kCacheShards)), ttl_(ttl) {}

  // Copies the row of `key` into `out` (dim floats) if held and fresh.
  bool Get(const RowKey& key, float* out, size_t dim, absl::Time now) {
    Shard& shard = ShardOf(key);
    MutexLock lock(&shard.mu);
    auto it = shard.index.find(key);
    if (it == shard.index.end()) return false;
    if (now - it->second->inserted > ttl_ || it->second->row.size() != dim) {
      shard.lru.erase(it->second);
      shard.index.erase(it);
      return false;
    }
    shard.lru.splice(shard.lru.begin(), shard.lru, it->second);
    std::memcpy(out, it->second->row.data(), dim * sizeof(float));
    return true;
  }

  void Put(const RowKey& key, const float* row, size_t dim, absl::Time now) {
    Shard& shard = ShardOf(key);
    MutexLock lock(&shard.mu);
    auto it = shard.index.find(key);
    if (it != shard.index.end()) {
      it->second->row.assign(row, row + dim);
      it->second->inserted = now;
      shard.lru.splice(shard.lru.begin(), shard.lru, it->second);
      return;
    }
    shard.lru.push_front(Entry{key, std::vector<float>(row, row + dim), now});
    shard.index[key] = shard.lru.begin();
    while (shard.lru.size() > per_shard_) {
      shard.index.erase(shard.lru.back().key);
      shard.lru.pop_back();
    }
  }

 private:
  struct Entry {
    RowKey key;
    std::vector<float> row;
    absl::Time inserted;
  };
  struct Shard {
    Mutex mu;
    std::list<Entry> lru ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<RowKey, std::list<Entry>::iterator> index
        ABSL_GUARDED_BY(mu);
  };
  Shard& ShardOf(const RowKey& key) {
    return shards_[Mix64(key.key ^ key.table) % kCacheShards];
  }

  const size_t per_shard_;
  const absl::Duration ttl_;
  Shard shards_[kCacheShards];
};

struct Replica {
  std::string address;
  std::unique_ptr<proto::ServingService::Stub> stub;
  std::atomic<int64_t> down_until_micros{0};
};

// Worth another replica: the replica (not the request) is the problem.
bool Retryable(grpc::StatusCode code, bool exact_version) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::CANCELLED ||
         (exact_version && code == grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace

struct ServingClient::Impl {
  ServingClientOptions options;
  std::vector<std::vector<std::unique_ptr<Replica>>> shards;
  std::unique_ptr<RowCache> cache;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> lookups{0}, hits{0}, misses{0}, failovers{0}, failed{0};

  // One serving shard's part of a Lookup, retried on other replicas.
  struct Call {
    Impl* impl;
    int32_t shard;
    bool exact_version;
    absl::Time deadline;
    proto::LookupRequest request;
    proto::LookupResponse response;
    std::unique_ptr<grpc::ClientContext> context;
    size_t replica = 0;  // the one tried last
    size_t attempts = 0;
    grpc::Status status;
    // Signalled when the call is finished.
    Mutex* mu;
    CondVar* done;
    size_t* unfinished;

    void Attempt() {
      const auto& replicas = impl->shards[shard];
      const int64_t now = absl::ToUnixMicros(absl::Now());
      // The next replica in turn that is not marked down (all down: the
      // next one anyway).
      size_t pick = replica;
      for (size_t i = 0; i < replicas.size(); ++i) {
        const size_t r = (replica + i) % replicas.size();
        if (replicas[r]->down_until_micros.load() <= now) {
          pick = r;
          break;
        }
      }
      replica = pick;
      ++attempts;
      context = std::make_unique<grpc::ClientContext>();
      context->set_deadline(absl::ToChronoTime(
          std::min(deadline, absl::Now() + impl->options.attempt_timeout)));
      response.Clear();
      replicas[replica]->stub->async()->Lookup(
          context.get(), &request, &response,
          [this](grpc::Status s) { Completed(std::move(s)); });
    }

    void Completed(grpc::Status s) {
      const auto& replicas = impl->shards[shard];
      if (!s.ok() && Retryable(s.error_code(), exact_version) &&
          absl::Now() < deadline && attempts < 2 * replicas.size() + 1) {
        replicas[replica]->down_until_micros.store(
            absl::ToUnixMicros(absl::Now() + impl->options.down_for));
        replica = (replica + 1) % replicas.size();
        impl->failovers.fetch_add(1, std::memory_order_relaxed);
        Attempt();
        return;
      }
      if (!s.ok()) {
        s = grpc::Status(
            s.error_code(),
            absl::StrCat("serving shard ", shard, " (",
                         replicas[replica]->address, ", ", attempts,
                         " attempt(s)): ", s.error_message()));
      }
      MutexLock lock(mu);
      status = std::move(s);
      if (--*unfinished == 0) done->SignalAll();
    }
  };
};

ServingClient::ServingClient(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
ServingClient::~ServingClient() = default;

absl::StatusOr<std::unique_ptr<ServingClient>> ServingClient::Connect(
    ServingClientOptions options) {
  if (options.replicas.empty()) {
    return absl::InvalidArgumentError(
        "ServingClientOptions.replicas is empty: name every serving shard");
  }
  for (size_t s = 0; s < options.replicas.size(); ++s) {
    if (options.replicas[s].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("serving shard ", s, " has no replica"));
    }
  }
  if (options.deadline <= absl::ZeroDuration() ||
      options.attempt_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "ServingClientOptions.deadline and attempt_timeout must be > 0");
  }
  auto impl = std::make_unique<Impl>();
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  for (const auto& shard : options.replicas) {
    impl->shards.emplace_back();
    for (const std::string& address : shard) {
      auto replica = std::make_unique<Replica>();
      replica->address = address;
      replica->stub = proto::ServingService::NewStub(grpc::CreateCustomChannel(
          address, grpc::InsecureChannelCredentials(), args));
      impl->shards.back().push_back(std::move(replica));
    }
  }
  if (options.cache_rows > 0) {
    impl->cache =
        std::make_unique<RowCache>(options.cache_rows, options.cache_ttl);
  }
  impl->options = std::move(options);
  return std::unique_ptr<ServingClient>(new ServingClient(std::move(impl)));
}

int32_t ServingClient::ShardOf(uint64_t key) const {
  return ShardOfKey(key, static_cast<int32_t>(impl_->shards.size()));
}

absl::Status ServingClient::Lookup(absl::Span<const ServingSlot> slots,
                                   std::vector<std::vector<float>>* out,
                                   uint64_t version, uint64_t* served_version) {
  Impl& impl = *impl_;
  impl.lookups.fetch_add(1, std::memory_order_relaxed);
  const absl::Time start = absl::Now();
  const int32_t shards = static_cast<int32_t>(impl.shards.size());
  // Checks, then the distinct (table, key) rows the slots need.
  struct Row {
    size_t table;  // into `tables`
    uint64_t key;
  };
  std::vector<std::string> tables;
  std::vector<int32_t> dims;
  absl::flat_hash_map<std::string, size_t> table_index;
  absl::flat_hash_map<RowKey, uint32_t> row_index;
  std::vector<Row> rows;
  std::vector<std::vector<uint32_t>> slot_rows(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    const ServingSlot& slot = slots[s];
    if (slot.dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", s, " (table '",
                                                     slot.table, "'): dim ",
                                                     slot.dim, " must be > 0"));
    }
    if (!slot.offsets.empty()) {
      if (slot.offsets.front() != 0 ||
          static_cast<size_t>(slot.offsets.back()) != slot.keys.size() ||
          !std::is_sorted(slot.offsets.begin(), slot.offsets.end())) {
        return absl::InvalidArgumentError(
            absl::StrCat("slot ", s, " (table '", slot.table,
                         "'): offsets must go from 0 "
                         "to ",
                         slot.keys.size(), " without decreasing"));
      }
    }
    if (!proto::Pooling_IsValid(slot.pooling)) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, ": unknown pooling ", slot.pooling));
    }
    auto [t, new_table] = table_index.try_emplace(slot.table, tables.size());
    if (new_table) {
      tables.push_back(slot.table);
      dims.push_back(slot.dim);
    } else if (dims[t->second] != slot.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", slot.table, "' named with dims ",
                       dims[t->second], " and ", slot.dim));
    }
    const uint64_t table_hash = absl::HashOf(slot.table);
    slot_rows[s].reserve(slot.keys.size());
    for (uint64_t key : slot.keys) {
      auto [r, inserted] = row_index.try_emplace(
          RowKey{table_hash, key}, static_cast<uint32_t>(rows.size()));
      if (inserted) rows.push_back(Row{t->second, key});
      slot_rows[s].push_back(r->second);
    }
  }
  // Rows from the cache, the rest by shard from the replicas.
  std::vector<std::vector<float>> values(rows.size());
  const bool use_cache = impl.cache != nullptr && version == 0;
  std::vector<std::vector<std::vector<uint32_t>>> wanted(
      shards, std::vector<std::vector<uint32_t>>(tables.size()));
  uint64_t hits = 0;
  for (uint32_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    values[r].resize(dims[row.table]);
    if (use_cache &&
        impl.cache->Get(RowKey{absl::HashOf(tables[row.table]), row.key},
                        values[r].data(), dims[row.table], start)) {
      ++hits;
      continue;
    }
    wanted[ShardOfKey(row.key, shards)][row.table].push_back(r);
  }
  impl.hits.fetch_add(hits, std::memory_order_relaxed);
  impl.misses.fetch_add(rows.size() - hits, std::memory_order_relaxed);
  Mutex mu;
  CondVar done;
  size_t unfinished = 0;
  std::vector<std::unique_ptr<Impl::Call>> calls;
  for (int32_t shard = 0; shard < shards; ++shard) {
    bool any = false;
    for (const auto& w : wanted[shard]) any |= !w.empty();
    if (!any) continue;
    auto call = std::make_unique<Impl::Call>();
    call->impl = &impl;
    call->shard = shard;
    call->exact_version = version != 0;
    call->deadline = start + impl.options.deadline;
    call->replica = impl.next.fetch_add(1, std::memory_order_relaxed) %
                    impl.shards[shard].size();
    call->mu = &mu;
    call->done = &done;
    call->unfinished = &unfinished;
    call->request.set_value_type(impl.options.wire_type);
    call->request.set_version(version);
    for (size_t t = 0; t < tables.size(); ++t) {
      if (wanted[shard][t].empty()) continue;
      proto::LookupSlot* slot = call->request.add_slot();
      slot->set_table(tables[t]);
      slot->set_pooling(proto::POOLING_NONE);
      std::string* keys = slot->mutable_keys();
      keys->resize(wanted[shard][t].size() * sizeof(uint64_t));
      for (size_t i = 0; i < wanted[shard][t].size(); ++i) {
        std::memcpy(keys->data() + i * sizeof(uint64_t),
                    &rows[wanted[shard][t][i]].key, sizeof(uint64_t));
      }
    }
    calls.push_back(std::move(call));
  }
  unfinished = calls.size();
  for (auto& call : calls) call->Attempt();
  {
    MutexLock lock(&mu);
    done.Wait(&mu, [&] { return unfinished == 0; });
  }
  uint64_t least_version = UINT64_MAX;
  for (auto& call : calls) {
    if (!call->status.ok()) {
      impl.failed.fetch_add(1, std::memory_order_relaxed);
      return wire::FromGrpcStatus(call->status);
    }
    least_version = std::min(least_version, call->response.version());
    int slot_index = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      const std::vector<uint32_t>& want = wanted[call->shard][t];
      if (want.empty()) continue;
      if (slot_index >= call->response.values_size()) {
        return absl::InternalError(absl::StrCat("serving shard ", call->shard,
                                                " answered too few slots"));
      }
      const std::string& bytes = call->response.values(slot_index++);
      const size_t dim = dims[t];
      const bool half = impl.options.wire_type == proto::FLOAT16;
      if (bytes.size() != want.size() * dim * (half ? 2 : 4)) {
        return absl::InternalError(absl::StrCat(
            "serving shard ", call->shard, " answered ", bytes.size(),
            " bytes for ", want.size(), " rows of dim ", dim));
      }
      for (size_t i = 0; i < want.size(); ++i) {
        float* row = values[want[i]].data();
        if (half) {
          std::vector<uint16_t> halves(dim);
          std::memcpy(halves.data(), bytes.data() + i * dim * 2, dim * 2);
          wire::HalvesToFloats(halves, row);
        } else {
          std::memcpy(row, bytes.data() + i * dim * 4, dim * 4);
        }
        if (use_cache) {
          impl.cache->Put(RowKey{absl::HashOf(tables[t]), rows[want[i]].key},
                          row, dim, start);
        }
      }
    }
  }
  if (served_version != nullptr) {
    *served_version = least_version == UINT64_MAX ? version : least_version;
  }
  // Pooling, on this side: a key named in several bags travelled once.
  out->resize(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    const ServingSlot& slot = slots[s];
    const size_t dim = slot.dim;
    std::vector<float>& pooled = (*out)[s];
    if (slot.pooling == proto::POOLING_NONE) {
      pooled.resize(slot.keys.size() * dim);
      for (size_t k = 0; k < slot.keys.size(); ++k) {
        std::memcpy(pooled.data() + k * dim, values[slot_rows[s][k]].data(),
                    dim * sizeof(float));
      }
      continue;
    }
    const size_t bags =
        slot.offsets.empty() ? slot.keys.size() : slot.offsets.size() - 1;
    pooled.assign(bags * dim, 0.0f);
    for (size_t b = 0; b < bags; ++b) {
      const size_t begin = slot.offsets.empty() ? b : slot.offsets[b];
      const size_t end = slot.offsets.empty() ? b + 1 : slot.offsets[b + 1];
      float* bag = pooled.data() + b * dim;
      for (size_t k = begin; k < end; ++k) {
        const float* row = values[slot_rows[s][k]].data();
        for (size_t d = 0; d < dim; ++d) bag[d] += row[d];
      }
      if (slot.pooling == proto::POOLING_MEAN && end > begin) {
        const float scale = 1.0f / static_cast<float>(end - begin);
        for (size_t d = 0; d < dim; ++d) bag[d] *= scale;
      }
    }
  }
  return absl::OkStatus();
}

std::vector<std::vector<proto::ServingVersionResponse>>
ServingClient::Versions() {
  std::vector<std::vector<proto::ServingVersionResponse>> out;
  for (const auto& shard : impl_->shards) {
    out.emplace_back();
    for (const auto& replica : shard) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
      proto::ServingVersionResponse response;
      replica->stub->Version(&context, proto::ServingVersionRequest(),
                             &response);
      out.back().push_back(response);
    }
  }
  return out;
}

ServingClientStats ServingClient::stats() const {
  ServingClientStats s;
  s.lookups = impl_->lookups.load();
  s.cache_hits = impl_->hits.load();
  s.cache_misses = impl_->misses.load();
  s.failovers = impl_->failovers.load();
  s.failed = impl_->failed.load();
  return s;
}

}  // namespace embedps::client
