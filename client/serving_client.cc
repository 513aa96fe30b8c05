#include "client/serving_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/identity_check.h"
#include "client/row_cache.h"
#include "common/key_hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/serving.grpc.pb.h"
#include "proto/stats.grpc.pb.h"
#include "proto/tables.pb.h"
#include "wire/float16.h"
#include "wire/grpc_status.h"

namespace embedps::client {
namespace {

// A replica's identity, as far as the client knows.
enum Identity : int { kUnverified = 0, kVerified = 1, kWrong = 2 };

struct Replica {
  std::string address;
  std::unique_ptr<proto::ServingService::Stub> stub;
  std::unique_ptr<proto::StatsService::Stub> stats;
  std::atomic<int64_t> down_until_micros{0};
  std::atomic<int> identity{kUnverified};
};

// Worth another replica: the replica (not the request) is the problem.
bool Retryable(grpc::StatusCode code, bool exact_version) {
  return code == grpc::StatusCode::UNAVAILABLE ||
         code == grpc::StatusCode::DEADLINE_EXCEEDED ||
         code == grpc::StatusCode::CANCELLED ||
         (exact_version && code == grpc::StatusCode::FAILED_PRECONDITION);
}

const proto::IdentifyRequest kIdentifyRequest;

}  // namespace

struct ServingClient::Impl {
  ServingClientOptions options;
  std::vector<std::vector<std::unique_ptr<Replica>>> shards;
  std::unique_ptr<RowCache> cache;
  // The replicas' identities: the cluster they must state (empty until the
  // first answer when options.cluster_id is), and why any was refused.
  Mutex identity_mu;
  std::string cluster ABSL_GUARDED_BY(identity_mu);
  bool cluster_known ABSL_GUARDED_BY(identity_mu) = false;
  std::vector<std::string> refused ABSL_GUARDED_BY(identity_mu);
  // Asks the replicas that have not answered yet, every down_for.
  std::thread verifier;
  Mutex stop_mu;
  CondVar stop_cv;
  bool stopping ABSL_GUARDED_BY(stop_mu) = false;

  ~Impl() {
    {
      MutexLock lock(&stop_mu);
      stopping = true;
    }
    stop_cv.SignalAll();
    if (verifier.joinable()) verifier.join();
  }

  // Asks every unverified replica at once, waiting at most `timeout`;
  // returns how many are still unverified.
  size_t VerifyReplicas(absl::Duration timeout) {
    struct Ask {
      int32_t shard;
      Replica* replica;
      grpc::ClientContext context;
      proto::ServerIdentity identity;
      grpc::Status status;
    };
    std::vector<std::unique_ptr<Ask>> asks;
    for (size_t s = 0; s < shards.size(); ++s) {
      for (auto& replica : shards[s]) {
        if (replica->identity.load() != kUnverified) continue;
        auto ask = std::make_unique<Ask>();
        ask->shard = static_cast<int32_t>(s);
        ask->replica = replica.get();
        ask->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
        asks.push_back(std::move(ask));
      }
    }
    Mutex mu;
    CondVar done;
    size_t unfinished = asks.size();
    for (auto& ask : asks) {
      Ask* a = ask.get();
      a->replica->stats->async()->Identify(
          &a->context, &kIdentifyRequest, &a->identity,
          [a, &mu, &done, &unfinished](grpc::Status status) {
            a->status = std::move(status);
            MutexLock lock(&mu);
            if (--unfinished == 0) done.SignalAll();
          });
    }
    {
      MutexLock lock(&mu);
      done.Wait(&mu, [&] { return unfinished == 0; });
    }
    size_t left = 0;
    for (auto& ask : asks) {
      if (!ask->status.ok()) {
        ++left;
        continue;
      }
      MutexLock lock(&identity_mu);
      if (!cluster_known) {
        cluster = options.cluster_id.empty() ? ask->identity.cluster_id()
                                             : options.cluster_id;
        cluster_known = true;
      }
      const absl::Status checked = CheckServingReplica(
          {ask->replica->address, ask->identity}, ask->shard,
          static_cast<int32_t>(shards.size()), cluster);
      ask->replica->identity.store(checked.ok() ? kVerified : kWrong);
      if (!checked.ok()) refused.emplace_back(checked.message());
    }
    return left;
  }

  void VerifyInBackground() {
    MutexLock lock(&stop_mu);
    while (!stopping) {
      stop_cv.WaitWithTimeout(&stop_mu, options.down_for);
      if (stopping) break;
      stop_mu.Unlock();
      const size_t left = VerifyReplicas(options.identify_timeout);
      stop_mu.Lock();
      if (left == 0) break;
    }
  }

  // UNAVAILABLE: no replica of `shard` has stated its identity (yet).
  grpc::Status NoVerifiedReplica(int32_t shard) {
    std::string why;
    {
      MutexLock lock(&identity_mu);
      for (const std::string& r : refused) absl::StrAppend(&why, "; ", r);
    }
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("no replica of serving shard ", shard,
                     " has stated that it is one (StatsService.Identify)",
                     why));
  }
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> lookups{0}, hits{0}, misses{0}, failovers{0}, failed{0};

  // One serving shard's part of a Lookup, retried on other replicas.
  struct Call {
    Impl* impl = nullptr;
    int32_t shard = 0;
    bool exact_version = false;
    absl::Time deadline;
    proto::LookupRequest request;
    proto::LookupResponse response;
    std::unique_ptr<grpc::ClientContext> context;
    size_t replica = 0;  // the one tried last
    size_t attempts = 0;
    grpc::Status status;
    // Async runs: signalled when every call of the Lookup is finished.
    Mutex* mu = nullptr;
    CondVar* done = nullptr;
    size_t* unfinished = nullptr;

    // No replica of the shard has stated its identity: the attempt fails.
    bool unverified = false;

    // Picks the replica of the next attempt (the next in turn that stated
    // its identity and is not marked down; all down: the next verified one
    // anyway) and a fresh context.
    void Prepare() {
      const auto& replicas = impl->shards[shard];
      const int64_t now = absl::ToUnixMicros(absl::Now());
      unverified = true;
      for (int pass = 0; pass < 2 && unverified; ++pass) {
        for (size_t i = 0; i < replicas.size(); ++i) {
          const size_t r = (replica + i) % replicas.size();
          if (replicas[r]->identity.load() != kVerified) continue;
          if (pass == 0 && replicas[r]->down_until_micros.load() > now) {
            continue;
          }
          replica = r;
          unverified = false;
          break;
        }
      }
      ++attempts;
      context = std::make_unique<grpc::ClientContext>();
      context->set_deadline(absl::ToChronoTime(
          std::min(deadline, absl::Now() + impl->options.attempt_timeout)));
      response.Clear();
    }

    // After an attempt: true if another replica should be tried (this one
    // is marked down); otherwise `status` is set.
    bool Retry(grpc::Status s) {
      const auto& replicas = impl->shards[shard];
      if (!s.ok() && Retryable(s.error_code(), exact_version) &&
          absl::Now() < deadline && attempts < 2 * replicas.size() + 1) {
        replicas[replica]->down_until_micros.store(
            absl::ToUnixMicros(absl::Now() + impl->options.down_for));
        replica = (replica + 1) % replicas.size();
        impl->failovers.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (!s.ok()) {
        s = grpc::Status(
            s.error_code(),
            absl::StrCat("serving shard ", shard, " (",
                         replicas[replica]->address, ", ", attempts,
                         " attempt(s)): ", s.error_message()));
      }
      status = std::move(s);
      return false;
    }

    // Runs the call to its end on this thread.
    void RunHere() {
      do {
        Prepare();
      } while (Retry(unverified ? impl->NoVerifiedReplica(shard)
                                : impl->shards[shard][replica]->stub->Lookup(
                                      context.get(), request, &response)));
    }

    // Starts the call; its attempts go on on gRPC's threads.
    void Start() {
      Prepare();
      while (unverified) {
        if (!Retry(impl->NoVerifiedReplica(shard))) {
          Finished();
          return;
        }
        Prepare();
      }
      impl->shards[shard][replica]->stub->async()->Lookup(
          context.get(), &request, &response, [this](grpc::Status s) {
            if (Retry(std::move(s))) {
              Start();
              return;
            }
            Finished();
          });
    }

    void Finished() {
      MutexLock lock(mu);
      if (--*unfinished == 0) done->SignalAll();
    }
  };

  // A Call for each of `shards` (null: nothing to ask that shard).
  using Calls = std::vector<std::unique_ptr<Call>>;

  std::unique_ptr<Call> NewCall(int32_t shard, uint64_t version,
                                absl::Time start) {
    auto call = std::make_unique<Call>();
    call->impl = this;
    call->shard = shard;
    call->exact_version = version != 0;
    call->deadline = start + options.deadline;
    call->replica =
        next.fetch_add(1, std::memory_order_relaxed) % shards[shard].size();
    call->request.set_value_type(options.wire_type);
    call->request.set_version(version);
    return call;
  }

  // Runs the calls (one alone on this thread; several at once) and returns
  // the first failure, or OK; *least_version: the least version answered.
  absl::Status Run(Calls& calls, uint64_t* least_version) {
    std::vector<Call*> live;
    for (auto& call : calls) {
      if (call != nullptr) live.push_back(call.get());
    }
    if (live.size() == 1) {
      live[0]->RunHere();
    } else if (!live.empty()) {
      Mutex mu;
      CondVar done;
      size_t unfinished = live.size();
      for (Call* call : live) {
        call->mu = &mu;
        call->done = &done;
        call->unfinished = &unfinished;
      }
      for (Call* call : live) call->Start();
      MutexLock lock(&mu);
      done.Wait(&mu, [&] { return unfinished == 0; });
    }
    *least_version = UINT64_MAX;
    for (Call* call : live) {
      if (!call->status.ok()) {
        failed.fetch_add(1, std::memory_order_relaxed);
        return wire::FromGrpcStatus(call->status);
      }
      *least_version = std::min(*least_version, call->response.version());
    }
    return absl::OkStatus();
  }

  // Decodes slot `index` of a call's answer, `floats` of them (rows of
  // `table`, `dim` wide as the caller said), into `out`.
  absl::Status Decode(const Call& call, int index, size_t floats,
                      absl::string_view table, size_t dim, float* out) const {
    if (index >= call.response.values_size()) {
      return absl::InternalError(absl::StrCat("serving shard ", call.shard,
                                              " answered too few slots"));
    }
    const std::string& bytes = call.response.values(index);
    const bool half = options.wire_type == proto::FLOAT16;
    const size_t width = half ? 2 : 4;
    if (bytes.size() != floats * width) {
      // Rows of another width than the caller's dim: the table's dim is
      // what the answer holds per row.
      const size_t units = dim == 0 ? 0 : floats / dim;
      if (units > 0 && bytes.size() % (units * width) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "table '", table, "' has dim ", bytes.size() / (units * width),
            ", not the ", dim, " given"));
      }
      return absl::InternalError(absl::StrCat(
          "serving shard ", call.shard, " answered ", bytes.size(),
          " bytes for slot ", index, " where ", floats, " values were due"));
    }
    if (half) {
      std::vector<uint16_t> halves(floats);
      if (floats > 0) std::memcpy(halves.data(), bytes.data(), bytes.size());
      wire::HalvesToFloats(halves, out);
    } else if (floats > 0) {
      std::memcpy(out, bytes.data(), bytes.size());
    }
    return absl::OkStatus();
  }

  absl::Status LookupPooledByReplicas(absl::Span<const ServingSlot> slots,
                                      std::vector<std::vector<float>>* out,
                                      uint64_t version, absl::Time start,
                                      uint64_t* served_version);
  absl::Status LookupThroughCache(absl::Span<const ServingSlot> slots,
                                  std::vector<std::vector<float>>* out,
                                  absl::Time start, uint64_t* served_version);
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
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   security::MakeChannelCredentials(options.security));
  auto impl = std::make_unique<Impl>();
  const grpc::ChannelArguments args =
      security::ChannelArgumentsFor(options.security);
  for (const auto& shard : options.replicas) {
    impl->shards.emplace_back();
    for (const std::string& address : shard) {
      auto replica = std::make_unique<Replica>();
      replica->address = address;
      const std::shared_ptr<grpc::Channel> channel =
          grpc::CreateCustomChannel(address, credentials, args);
      replica->stub = proto::ServingService::NewStub(channel);
      replica->stats = proto::StatsService::NewStub(channel);
      impl->shards.back().push_back(std::move(replica));
    }
  }
  if (options.cache_rows > 0) {
    impl->cache =
        std::make_unique<RowCache>(options.cache_rows, options.cache_ttl);
  }
  impl->options = std::move(options);
  const size_t unverified =
      impl->VerifyReplicas(impl->options.identify_timeout);
  {
    MutexLock lock(&impl->identity_mu);
    if (!impl->refused.empty()) {
      return absl::FailedPreconditionError(absl::StrJoin(impl->refused, "; "));
    }
  }
  if (unverified > 0) {
    Impl* i = impl.get();
    impl->verifier = std::thread([i] { i->VerifyInBackground(); });
  }
  return std::unique_ptr<ServingClient>(new ServingClient(std::move(impl)));
}

int32_t ServingClient::ShardOf(uint64_t key) const {
  return ShardOfKey(key, static_cast<int32_t>(impl_->shards.size()));
}

namespace {

size_t BagsOf(const ServingSlot& slot) {
  return slot.offsets.empty() ? slot.keys.size() : slot.offsets.size() - 1;
}

// Floats of a slot's answer.
size_t FloatsOf(const ServingSlot& slot) {
  return (slot.pooling == proto::POOLING_NONE ? slot.keys.size()
                                              : BagsOf(slot)) *
         static_cast<size_t>(slot.dim);
}

absl::Status CheckSlots(absl::Span<const ServingSlot> slots) {
  absl::flat_hash_map<absl::string_view, int32_t> dims;
  for (size_t s = 0; s < slots.size(); ++s) {
    const ServingSlot& slot = slots[s];
    if (slot.dim <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", s, " (table '",
                                                     slot.table, "'): dim ",
                                                     slot.dim, " must be > 0"));
    }
    if (!slot.offsets.empty() &&
        (slot.offsets.front() != 0 ||
         static_cast<size_t>(slot.offsets.back()) != slot.keys.size() ||
         !std::is_sorted(slot.offsets.begin(), slot.offsets.end()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", s, " (table '", slot.table, "'): offsets must go from 0 to ",
          slot.keys.size(), " without decreasing"));
    }
    if (!proto::Pooling_IsValid(slot.pooling)) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", s, ": unknown pooling ", slot.pooling));
    }
    auto [d, added] = dims.try_emplace(slot.table, slot.dim);
    if (!added && d->second != slot.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", slot.table, "' named with dims ", d->second,
                       " and ", slot.dim));
    }
  }
  return absl::OkStatus();
}

void SetKeys(absl::Span<const uint64_t> keys, proto::LookupSlot* slot) {
  slot->set_keys(reinterpret_cast<const char*>(keys.data()),
                 keys.size() * sizeof(uint64_t));
}

void SetOffsets(absl::Span<const int32_t> offsets, proto::LookupSlot* slot) {
  slot->set_offsets(reinterpret_cast<const char*>(offsets.data()),
                    offsets.size() * sizeof(int32_t));
}

}  // namespace

absl::Status ServingClient::Lookup(absl::Span<const ServingSlot> slots,
                                   std::vector<std::vector<float>>* out,
                                   uint64_t version, uint64_t* served_version) {
  impl_->lookups.fetch_add(1, std::memory_order_relaxed);
  RETURN_IF_ERROR(CheckSlots(slots));
  const absl::Time start = absl::Now();
  uint64_t served = version;
  absl::Status status =
      impl_->cache != nullptr && version == 0
          ? impl_->LookupThroughCache(slots, out, start, &served)
          : impl_->LookupPooledByReplicas(slots, out, version, start, &served);
  if (status.ok() && served_version != nullptr) *served_version = served;
  return status;
}

// Each shard pools its own keys of each bag: one shard answers the bags
// whole; several answer partial sums, added here (MEAN divided here).
absl::Status ServingClient::Impl::LookupPooledByReplicas(
    absl::Span<const ServingSlot> slots, std::vector<std::vector<float>>* out,
    uint64_t version, absl::Time start, uint64_t* served_version) {
  const int32_t n = static_cast<int32_t>(shards.size());
  Calls calls(n);
  out->resize(slots.size());
  if (n == 1) {
    calls[0] = NewCall(0, version, start);
    for (const ServingSlot& slot : slots) {
      proto::LookupSlot* request = calls[0]->request.add_slot();
      request->set_table(slot.table);
      request->set_pooling(slot.pooling);
      SetKeys(slot.keys, request);
      SetOffsets(slot.offsets, request);
    }
    uint64_t least = 0;
    RETURN_IF_ERROR(Run(calls, &least));
    *served_version = least;
    for (size_t s = 0; s < slots.size(); ++s) {
      (*out)[s].resize(FloatsOf(slots[s]));
      RETURN_IF_ERROR(Decode(*calls[0], static_cast<int>(s), (*out)[s].size(),
                             slots[s].table, static_cast<size_t>(slots[s].dim),
                             (*out)[s].data()));
    }
    return absl::OkStatus();
  }
  // Split each slot by shard: its keys, bag offsets (SUM/MEAN) or the
  // keys' positions (NONE).
  std::vector<std::vector<std::vector<uint32_t>>> positions(
      slots.size(), std::vector<std::vector<uint32_t>>(n));
  std::vector<std::vector<uint64_t>> keys(n);
  std::vector<std::vector<int32_t>> offsets(n);
  std::vector<uint32_t> shard_keys(n, 0);
  for (size_t s = 0; s < slots.size(); ++s) {
    const ServingSlot& slot = slots[s];
    const bool pooled = slot.pooling != proto::POOLING_NONE;
    for (int32_t i = 0; i < n; ++i) {
      keys[i].clear();
      offsets[i].assign(pooled ? 1 : 0, 0);
    }
    const size_t bags = pooled ? BagsOf(slot) : 1;
    for (size_t b = 0; b < bags; ++b) {
      size_t begin = 0, end = slot.keys.size();  // NONE: one "bag"
      if (pooled) {
        begin = slot.offsets.empty() ? b : slot.offsets[b];
        end = slot.offsets.empty() ? b + 1 : slot.offsets[b + 1];
      }
      for (size_t k = begin; k < end; ++k) {
        const int32_t shard = ShardOfKey(slot.keys[k], n);
        keys[shard].push_back(slot.keys[k]);
        if (!pooled) positions[s][shard].push_back(static_cast<uint32_t>(k));
      }
      if (pooled) {
        for (int32_t i = 0; i < n; ++i) {
          offsets[i].push_back(static_cast<int32_t>(keys[i].size()));
        }
      }
    }
    for (int32_t i = 0; i < n; ++i) {
      shard_keys[i] += static_cast<uint32_t>(keys[i].size());
      if (calls[i] == nullptr) calls[i] = NewCall(i, version, start);
      proto::LookupSlot* request = calls[i]->request.add_slot();
      request->set_table(slot.table);
      request->set_pooling(pooled ? proto::POOLING_SUM : proto::POOLING_NONE);
      SetKeys(keys[i], request);
      SetOffsets(offsets[i], request);
    }
  }
  for (int32_t i = 0; i < n; ++i) {
    if (shard_keys[i] == 0) calls[i].reset();  // nothing there to ask
  }
  uint64_t least = 0;
  RETURN_IF_ERROR(Run(calls, &least));
  *served_version = least == UINT64_MAX ? version : least;
  std::vector<float> part;
  for (size_t s = 0; s < slots.size(); ++s) {
    const ServingSlot& slot = slots[s];
    const size_t dim = slot.dim;
    std::vector<float>& result = (*out)[s];
    result.assign(FloatsOf(slot), 0.0f);
    for (int32_t i = 0; i < n; ++i) {
      if (calls[i] == nullptr) continue;
      if (slot.pooling == proto::POOLING_NONE) {
        const std::vector<uint32_t>& at = positions[s][i];
        part.resize(at.size() * dim);
        RETURN_IF_ERROR(Decode(*calls[i], static_cast<int>(s), part.size(),
                               slot.table, dim, part.data()));
        for (size_t k = 0; k < at.size(); ++k) {
          std::memcpy(result.data() + at[k] * dim, part.data() + k * dim,
                      dim * sizeof(float));
        }
        continue;
      }
      part.resize(result.size());
      RETURN_IF_ERROR(Decode(*calls[i], static_cast<int>(s), part.size(),
                             slot.table, dim, part.data()));
      for (size_t f = 0; f < result.size(); ++f) result[f] += part[f];
    }
    if (slot.pooling == proto::POOLING_MEAN && !slot.offsets.empty()) {
      for (size_t b = 0; b + 1 < slot.offsets.size(); ++b) {
        const int32_t count = slot.offsets[b + 1] - slot.offsets[b];
        if (count <= 1) continue;
        const float scale = 1.0f / static_cast<float>(count);
        for (size_t d = 0; d < dim; ++d) result[b * dim + d] *= scale;
      }
    }
  }
  return absl::OkStatus();
}

// Distinct rows from the cache, the rest (as rows) from the replicas of
// their shards, then pooled here: a key in many bags travels once.
absl::Status ServingClient::Impl::LookupThroughCache(
    absl::Span<const ServingSlot> slots, std::vector<std::vector<float>>* out,
    absl::Time start, uint64_t* served_version) {
  const int32_t n = static_cast<int32_t>(shards.size());
  // Tables of the request, then its distinct rows: rows[r] at
  // values[row_at[r]].
  std::vector<absl::string_view> tables;
  std::vector<uint64_t> table_hash;
  std::vector<size_t> table_dim;
  std::vector<size_t> slot_table(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    auto t = std::find(tables.begin(), tables.end(), slots[s].table);
    slot_table[s] = t - tables.begin();
    if (t == tables.end()) {
      tables.push_back(slots[s].table);
      table_hash.push_back(absl::HashOf(slots[s].table));
      table_dim.push_back(slots[s].dim);
    }
  }
  struct Row {
    uint32_t table;
    uint64_t key;
    size_t at;  // into values
  };
  std::vector<Row> rows;
  absl::flat_hash_map<std::pair<uint32_t, uint64_t>, uint32_t> row_of;
  std::vector<std::vector<uint32_t>> slot_rows(slots.size());
  size_t floats = 0;
  for (size_t s = 0; s < slots.size(); ++s) {
    const uint32_t t = static_cast<uint32_t>(slot_table[s]);
    slot_rows[s].reserve(slots[s].keys.size());
    for (uint64_t key : slots[s].keys) {
      auto [r, added] =
          row_of.try_emplace({t, key}, static_cast<uint32_t>(rows.size()));
      if (added) {
        rows.push_back(Row{t, key, floats});
        floats += table_dim[t];
      }
      slot_rows[s].push_back(r->second);
    }
  }
  std::vector<float> values(floats);
  // wanted[shard][table]: rows to read there.
  std::vector<std::vector<std::vector<uint32_t>>> wanted(
      n, std::vector<std::vector<uint32_t>>(tables.size()));
  uint64_t found = 0;
  uint64_t least_cached = UINT64_MAX;
  for (uint32_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    uint64_t row_version = 0;
    if (cache->Get(table_hash[row.table], row.key, values.data() + row.at,
                   table_dim[row.table], start, &row_version)) {
      ++found;
      least_cached = std::min(least_cached, row_version);
      continue;
    }
    wanted[ShardOfKey(row.key, n)][row.table].push_back(r);
  }
  hits.fetch_add(found, std::memory_order_relaxed);
  misses.fetch_add(rows.size() - found, std::memory_order_relaxed);
  Calls calls(n);
  std::vector<uint64_t> keys;
  for (int32_t i = 0; i < n; ++i) {
    for (size_t t = 0; t < tables.size(); ++t) {
      if (wanted[i][t].empty()) continue;
      if (calls[i] == nullptr) calls[i] = NewCall(i, 0, start);
      proto::LookupSlot* request = calls[i]->request.add_slot();
      request->set_table(std::string(tables[t]));
      request->set_pooling(proto::POOLING_NONE);
      keys.clear();
      for (uint32_t r : wanted[i][t]) keys.push_back(rows[r].key);
      SetKeys(keys, request);
    }
  }
  uint64_t least = 0;
  RETURN_IF_ERROR(Run(calls, &least));
  least = std::min(least, least_cached);
  *served_version = least == UINT64_MAX ? 0 : least;
  std::vector<float> part;
  for (int32_t i = 0; i < n; ++i) {
    if (calls[i] == nullptr) continue;
    int index = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      const std::vector<uint32_t>& want = wanted[i][t];
      if (want.empty()) continue;
      const size_t dim = table_dim[t];
      part.resize(want.size() * dim);
      RETURN_IF_ERROR(
          Decode(*calls[i], index++, part.size(), tables[t], dim, part.data()));
      for (size_t k = 0; k < want.size(); ++k) {
        const float* row = part.data() + k * dim;
        std::memcpy(values.data() + rows[want[k]].at, row, dim * sizeof(float));
        cache->Put(table_hash[t], rows[want[k]].key, row, dim, start,
                   calls[i]->response.version());
      }
    }
  }
  out->resize(slots.size());
  for (size_t s = 0; s < slots.size(); ++s) {
    const ServingSlot& slot = slots[s];
    const size_t dim = slot.dim;
    std::vector<float>& result = (*out)[s];
    if (slot.pooling == proto::POOLING_NONE) {
      result.resize(slot.keys.size() * dim);
      for (size_t k = 0; k < slot.keys.size(); ++k) {
        std::memcpy(result.data() + k * dim,
                    values.data() + rows[slot_rows[s][k]].at,
                    dim * sizeof(float));
      }
      continue;
    }
    const size_t bags = BagsOf(slot);
    result.assign(bags * dim, 0.0f);
    for (size_t b = 0; b < bags; ++b) {
      const size_t begin = slot.offsets.empty() ? b : slot.offsets[b];
      const size_t end = slot.offsets.empty() ? b + 1 : slot.offsets[b + 1];
      float* bag = result.data() + b * dim;
      for (size_t k = begin; k < end; ++k) {
        const float* row = values.data() + rows[slot_rows[s][k]].at;
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
