#include "client/client.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "checkpoint/manifest.h"
#include "checkpoint/retention.h"
#include "client/bulk_fan_out.h"
#include "common/file_io.h"
#include "common/key_hash.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/stats.grpc.pb.h"
#include "proto/training.grpc.pb.h"
#include "wire/bulk_codec.h"
#include "wire/server_identity.h"

namespace embedps::client {
namespace {

// A batch's distinct keys, and where each caller position finds its row.
struct Dedup {
  // Distinct, in order of first occurrence; a view of the caller's keys
  // when they are distinct (or said to be).
  absl::Span<const uint64_t> keys;
  std::vector<uint64_t> storage;   // keys, unless they are the caller's
  std::vector<uint32_t> position;  // caller position i -> index into keys
  // keys are the caller's keys in the caller's order.
  bool distinct() const { return position.empty(); }
};

Dedup Deduplicate(absl::Span<const uint64_t> keys, Client::Keys keys_are) {
  Dedup d;
  if (keys_are == Client::Keys::kUnique) {
    d.keys = keys;
    return d;
  }
  d.position.resize(keys.size());
  absl::flat_hash_map<uint64_t, uint32_t> index;
  index.reserve(keys.size());
  // A large batch's map is larger than the cache: each insert would wait
  // for its slot's line; fetch them a few keys ahead.
  constexpr size_t kPrefetchDistance = 16;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i + kPrefetchDistance < keys.size()) {
      index.prefetch(keys[i + kPrefetchDistance]);
    }
    auto [it, inserted] = index.try_emplace(keys[i], d.storage.size());
    if (inserted) d.storage.push_back(keys[i]);
    d.position[i] = it->second;
  }
  if (d.storage.size() == keys.size()) {
    // No duplicates: the caller's keys, in order.
    d.storage.clear();
    d.position.clear();
    d.keys = keys;
  } else {
    d.keys = d.storage;
  }
  return d;
}

// One RPC's share of a batch: indices into the distinct keys.
struct Part {
  int32_t shard;
  std::vector<uint32_t> rows;
  // Push to SYNC/SSP tables: nonzero on the shard's last part.
  uint32_t parts_in_step = 0;
};

// Marks the last part of each shard with the shard's part count, adding an
// empty closing part for shards that have no keys in this step.
void CloseStepOnEveryShard(int32_t shards, std::vector<Part>& parts) {
  std::vector<uint32_t> count(shards, 0);
  for (const Part& p : parts) ++count[p.shard];
  for (int32_t s = 0; s < shards; ++s) {
    if (count[s] == 0) {
      parts.push_back({s, {}, 0});
      count[s] = 1;
    }
  }
  std::vector<bool> closed(shards, false);
  for (size_t i = parts.size(); i-- > 0;) {
    Part& p = parts[i];
    if (!closed[p.shard]) {
      p.parts_in_step = count[p.shard];
      closed[p.shard] = true;
    }
  }
}

std::vector<Part> SplitByShard(absl::Span<const uint64_t> keys, int32_t shards,
                               size_t max_keys) {
  std::vector<std::vector<uint32_t>> by_shard(shards);
  for (uint32_t i = 0; i < keys.size(); ++i) {
    by_shard[ShardOfKey(keys[i], shards)].push_back(i);
  }
  std::vector<Part> parts;
  for (int32_t s = 0; s < shards; ++s) {
    for (size_t begin = 0; begin < by_shard[s].size(); begin += max_keys) {
      const size_t end = std::min(by_shard[s].size(), begin + max_keys);
      parts.push_back({s,
                       std::vector<uint32_t>(by_shard[s].begin() + begin,
                                             by_shard[s].begin() + end),
                       0});
    }
  }
  return parts;
}

// "/embedps.proto.TrainingService/<method>"
std::string MethodPath(absl::string_view method) {
  return absl::StrCat("/", proto::TrainingService::service_full_name(), "/",
                      method);
}

// Runs every part's work in parallel (the last on this thread) and returns
// the first error.
absl::Status RunParts(size_t count,
                      const std::function<absl::Status(size_t)>& work) {
  if (count == 0) return absl::OkStatus();
  std::vector<std::future<absl::Status>> pending;
  for (size_t p = 0; p + 1 < count; ++p) {
    pending.push_back(std::async(std::launch::async, work, p));
  }
  absl::Status status = work(count - 1);
  for (auto& f : pending) status.Update(f.get());
  return status;
}

}  // namespace

struct Client::Impl {
  ClientOptions options;
  // One channel's stubs: the generated ones, and a generic one for the
  // bulk methods (Pull, Push), whose messages are built and read without
  // copies (wire/bulk_message.h).
  struct Stubs {
    std::unique_ptr<proto::TrainingService::Stub> training;
    std::unique_ptr<proto::StatsService::Stub> stats;
    std::unique_ptr<grpc::GenericStub> bulk;
  };
  // A shard's replicas (one unless replicated: "a|b" in
  // ClientOptions.servers), each with its channels; calls go to `current`,
  // and an UNAVAILABLE answer moves on to the next replica (the primary may
  // have changed).
  struct Route {
    std::vector<std::vector<Stubs>> replicas;  // [replica][channel]
    std::atomic<size_t> current{0};
  };
  std::vector<std::unique_ptr<Route>> routes;
  const std::string pull_path = MethodPath("Pull");
  const std::string push_path = MethodPath("Push");
  std::atomic<uint64_t> next_channel{0};

  // The shard's next channel, in turn, at its current replica.
  Stubs& Channel(size_t shard) {
    Route& route = *routes[shard];
    auto& channels =
        route.replicas[route.current.load(std::memory_order_relaxed) %
                       route.replicas.size()];
    if (channels.size() == 1) return channels[0];
    return channels[next_channel.fetch_add(1, std::memory_order_relaxed) %
                    channels.size()];
  }
  // For a fan-out's retries.
  BulkFanOut::Reroute Reroute() {
    return [this](int32_t shard, grpc::GenericStub* stub) {
      const bool other_replica = Unavailable(shard, stub);
      return BulkFanOut::NextStub{Channel(shard).bulk.get(), other_replica};
    };
  }
  // `stub` answered UNAVAILABLE (or not within the attempt's deadline): if
  // it is the shard's current replica, the next one is tried from now on.
  // True if the shard has several replicas (the next attempt goes to
  // another one than `stub`'s).
  template <typename StubType>
  bool Unavailable(size_t shard, const StubType* stub) {
    Route& route = *routes[shard];
    if (route.replicas.size() < 2) return false;
    size_t current = route.current.load();
    for (const Stubs& s : route.replicas[current % route.replicas.size()]) {
      if (static_cast<const void*>(&s) == stub ||
          static_cast<const void*>(s.bulk.get()) == stub) {
        route.current.compare_exchange_strong(current, current + 1);
        return true;
      }
    }
    return true;  // another call moved the shard on already
  }
  uint64_t client_id = 0;
  std::atomic<uint64_t> next_sequence{1};
  // Per shard: the incarnation of the server process that answered first
  // (0: none yet).
  std::unique_ptr<std::atomic<uint64_t>[]> incarnations;

  // OK if the server that answered `context` is the process this client
  // has been talking to (or the first); ABORTED naming it otherwise.
  absl::Status CheckIncarnation(int32_t shard,
                                const grpc::ClientContext& context) {
    // The trailing metadata: every answer has it, also an error sent as
    // trailers only (initial metadata may not have been received then).
    std::string value, restored;
    const auto& metadata = context.GetServerTrailingMetadata();
    if (auto it = metadata.find(wire::kIncarnationMetadata);
        it != metadata.end()) {
      value.assign(it->second.data(), it->second.size());
    }
    if (auto it = metadata.find(wire::kRestoredStepMetadata);
        it != metadata.end()) {
      restored.assign(it->second.data(), it->second.size());
    }
    uint64_t incarnation = 0;
    if (value.empty() || !absl::SimpleHexAtoi(value, &incarnation) ||
        incarnation == 0) {
      return absl::OkStatus();  // a server that does not say
    }
    uint64_t known = 0;
    std::atomic<uint64_t>& slot = incarnations[shard];
    if (slot.compare_exchange_strong(known, incarnation) ||
        known == incarnation) {
      return absl::OkStatus();
    }
    if (options.accept_restarted_shards) {
      slot.store(incarnation);
      return absl::OkStatus();
    }
    return absl::AbortedError(absl::StrCat(
        "shard ", shard, " (", options.servers[shard],
        ") is a new server process since this client's first call to it: "
        "it was restarted",
        restored.empty()
            ? " empty"
            : absl::StrCat(" from a checkpoint of step ", restored),
        ", so the updates it had applied since are gone and training on it "
        "would silently mix steps. Stop the job and restart it, with every "
        "shard, from its last complete checkpoint (ps_worker --restore=ROOT; "
        "docs/operations.md)"));
  }

  // Calls `rpc(stubs, context)` (the shard's stubs for the attempt) until
  // it succeeds, fails with a non-retryable code, or the retry deadline
  // passes.
  // `extra_time`: how long the server may legitimately hold the call
  // (a SYNC Pull waiting for other workers).
  template <typename Rpc>
  absl::Status Call(int32_t shard, absl::string_view method, Rpc&& rpc,
                    absl::Duration extra_time = absl::ZeroDuration()) {
    RetrySchedule schedule(options.retry, extra_time);
    while (true) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(schedule.StartAttempt()));
      // The attempt's stub: the one the call goes to is the one a failure
      // is reported against.
      Stubs* const stub = &Channel(shard);
      const grpc::Status status = rpc(*stub, &context);
      if (status.ok()) return absl::OkStatus();
      const bool other_replica =
          (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
           status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) &&
          Unavailable(shard, stub);
      const std::optional<absl::Duration> backoff =
          schedule.BackoffAfter(status, absl::Now(), other_replica);
      if (!backoff.has_value()) {
        return CallFailed(method, shard, options.servers[shard],
                          schedule.attempts(), status);
      }
      absl::SleepFor(*backoff);
    }
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.servers is empty: name every shard");
  }
  if (options.channels_per_shard < 1) {
    return absl::InvalidArgumentError(
        "ClientOptions.channels_per_shard must be >= 1");
  }
  if (options.max_keys_per_request == 0) {
    return absl::InvalidArgumentError(
        "ClientOptions.max_keys_per_request must be > 0");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   security::MakeChannelCredentials(options.security));
  auto impl = std::make_unique<Impl>();
  // A restarted shard is found within a second.
  grpc::ChannelArguments args = security::ChannelArgumentsFor(options.security);
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.channels_per_shard > 1) {
    // Otherwise gRPC shares one connection among channels of equal
    // arguments.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  }
  for (const std::string& server : options.servers) {
    auto route = std::make_unique<Impl::Route>();
    for (absl::string_view replica :
         absl::StrSplit(server, '|', absl::SkipEmpty())) {
      auto& channels = route->replicas.emplace_back();
      for (int c = 0; c < options.channels_per_shard; ++c) {
        const std::shared_ptr<grpc::Channel> channel =
            grpc::CreateCustomChannel(std::string(replica), credentials, args);
        channels.push_back({proto::TrainingService::NewStub(channel),
                            proto::StatsService::NewStub(channel),
                            std::make_unique<grpc::GenericStub>(channel)});
      }
    }
    if (route->replicas.empty()) {
      return absl::InvalidArgumentError(
          "ClientOptions.servers has an empty entry");
    }
    impl->routes.push_back(std::move(route));
  }
  impl->incarnations =
      std::make_unique<std::atomic<uint64_t>[]>(options.servers.size());
  impl->client_id = std::random_device{}() * uint64_t{0x100000001} ^
                    static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  impl->options = std::move(options);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

int32_t Client::num_shards() const {
  return static_cast<int32_t>(impl_->routes.size());
}
uint64_t Client::client_id() const { return impl_->client_id; }

namespace {

// The handle of `config`'s table, its ids not yet filled in.
TableHandle HandleOf(const proto::TableConfig& config, int32_t shards) {
  TableHandle handle;
  handle.name = config.name();
  handle.dim = config.dim();
  handle.shard_table_ids.resize(shards);
  handle.mode = config.consistency().mode();
  handle.step_timeout =
      handle.mode == proto::ConsistencyConfig::ASYNC ? absl::ZeroDuration()
      : config.consistency().timeout_ms() == 0
          ? absl::Seconds(60)
          : absl::Milliseconds(config.consistency().timeout_ms());
  return handle;
}

}  // namespace

absl::StatusOr<TableHandle> Client::OpenTable(const std::string& name) {
  std::vector<proto::ListTablesResponse> lists(num_shards());
  RETURN_IF_ERROR(RunParts(num_shards(), [&](size_t shard) {
    return impl_->Call(static_cast<int32_t>(shard), "ListTables",
                       [&](Impl::Stubs& stub, grpc::ClientContext* c) {
                         return stub.training->ListTables(
                             c, proto::ListTablesRequest(), &lists[shard]);
                       });
  }));
  std::optional<TableHandle> handle;
  for (int32_t shard = 0; shard < num_shards(); ++shard) {
    bool found = false;
    for (const auto& entry : lists[shard].table()) {
      if (entry.config().name() != name) continue;
      if (!handle.has_value()) handle = HandleOf(entry.config(), num_shards());
      handle->shard_table_ids[shard] = entry.table_id();
      found = true;
    }
    if (!found) {
      return absl::NotFoundError(
          absl::StrCat("no table named '", name, "' on shard ", shard, " (",
                       impl_->options.servers[shard], ")"));
    }
  }
  return *std::move(handle);
}

absl::StatusOr<TableHandle> Client::CreateTable(
    const proto::TableConfig& config) {
  TableHandle handle = HandleOf(config, num_shards());
  proto::CreateTableRequest request;
  *request.mutable_config() = config;
  const absl::Status status = RunParts(num_shards(), [&](size_t shard) {
    proto::CreateTableResponse response;
    absl::Status s = impl_->Call(
        static_cast<int32_t>(shard), "CreateTable",
        [&](Impl::Stubs& stub, grpc::ClientContext* context) {
          return stub.training->CreateTable(context, request, &response);
        });
    handle.shard_table_ids[shard] = response.table_id();
    return s;
  });
  if (!status.ok()) return status;
  return handle;
}

absl::Status Client::DropTable(const std::string& name) {
  proto::DropTableRequest request;
  request.set_name(name);
  std::atomic<int> dropped{0};
  const absl::Status status = RunParts(num_shards(), [&](size_t shard) {
    proto::DropTableResponse response;
    absl::Status s = impl_->Call(
        static_cast<int32_t>(shard), "DropTable",
        [&](Impl::Stubs& stub, grpc::ClientContext* context) {
          return stub.training->DropTable(context, request, &response);
        });
    if (s.ok()) dropped.fetch_add(1);
    return absl::IsNotFound(s) ? absl::OkStatus() : s;
  });
  if (!status.ok()) return status;
  if (dropped.load() == 0) {
    return absl::NotFoundError(
        absl::StrCat("no table named '", name, "' on any shard"));
  }
  return absl::OkStatus();
}

namespace {

// A ready future holding `status`.
std::future<absl::Status> Ready(absl::Status status) {
  std::promise<absl::Status> promise;
  promise.set_value(std::move(status));
  return promise.get_future();
}

// What a Pull needs until its last response: the batch's parts and where
// their rows go.
struct PullOp {
  Dedup dedup;
  std::vector<Part> parts;
  // Rows of the distinct keys when they are not the caller's in order.
  std::vector<float> rows;
  absl::Span<float> values;
  size_t dim = 0;
  std::promise<absl::Status> done;
};

}  // namespace

absl::Status Client::Pull(const TableHandle& table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<float> values, uint64_t step,
                          Keys keys_are) {
  return StartPull(table, keys, values, step, /*read_only=*/false, keys_are)
      .get();
}

absl::Status Client::Lookup(const TableHandle& table,
                            absl::Span<const uint64_t> keys,
                            absl::Span<float> values, uint64_t step,
                            Keys keys_are) {
  return StartPull(table, keys, values, step, /*read_only=*/true, keys_are)
      .get();
}

std::future<absl::Status> Client::PullAsync(const TableHandle& table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<float> values,
                                            uint64_t step, Keys keys_are) {
  return StartPull(table, keys, values, step, /*read_only=*/false, keys_are);
}

std::future<absl::Status> Client::LookupAsync(const TableHandle& table,
                                              absl::Span<const uint64_t> keys,
                                              absl::Span<float> values,
                                              uint64_t step, Keys keys_are) {
  return StartPull(table, keys, values, step, /*read_only=*/true, keys_are);
}

std::future<absl::Status> Client::StartPull(const TableHandle& table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<float> values,
                                            uint64_t step, bool read_only,
                                            Keys keys_are) {
  const char* const method = read_only ? "Lookup" : "Pull";
  const size_t dim = table.dim;
  if (values.size() != keys.size() * dim) {
    return Ready(absl::InvalidArgumentError(absl::StrCat(
        method, " of table '", table.name, "': ", keys.size(), " keys need ",
        keys.size() * dim, " values (dim ", dim, "), got ", values.size())));
  }
  if (table.shard_table_ids.size() != static_cast<size_t>(num_shards())) {
    return Ready(
        absl::InvalidArgumentError("TableHandle is not from this client"));
  }
  if (keys.empty()) return Ready(absl::OkStatus());
  auto op = std::make_shared<PullOp>();
  op->dedup = Deduplicate(keys, keys_are);
  op->parts = SplitByShard(op->dedup.keys, num_shards(),
                           impl_->options.max_keys_per_request);
  op->values = values;
  op->dim = dim;
  // Without duplicates the distinct keys are the caller's keys in order,
  // so rows land in `values` directly; otherwise in `rows`, then fanned out.
  if (!op->dedup.distinct()) op->rows.resize(op->dedup.keys.size() * dim);
  float* const row_base =
      op->dedup.distinct() ? values.data() : op->rows.data();
  const proto::ValueType wire_type = impl_->options.wire_type;
  std::future<absl::Status> result = op->done.get_future();
  // Each row goes from the received slices to its place, on the gRPC
  // thread that received it (parts write disjoint rows).
  PullOp* const raw = op.get();
  std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
      impl_->pull_path, method, impl_->options.retry, table.step_timeout,
      [raw, row_base, wire_type](size_t p, const grpc::ByteBuffer& response) {
        const Part& part = raw->parts[p];
        const size_t dim = raw->dim;
        const absl::Status decoded = wire::DecodePullResponse(
            response, wire_type, part.rows.size(), dim, [&](size_t k) {
              return row_base + static_cast<size_t>(part.rows[k]) * dim;
            });
        if (!decoded.ok()) {
          return absl::InternalError(
              absl::StrCat("shard ", part.shard,
                           " answered a malformed Pull: ", decoded.message()));
        }
        return absl::OkStatus();
      },
      [impl = impl_.get()](int32_t shard, const grpc::ClientContext& context) {
        return impl->CheckIncarnation(shard, context);
      });
  calls->set_reroute(impl_->Reroute());
  // Each part's call starts as soon as its request is built.
  for (const Part& part : op->parts) {
    proto::PullRequest header;
    header.set_table_id(table.shard_table_ids[part.shard]);
    header.set_value_type(wire_type);
    header.set_step(step);
    header.set_read_only(read_only);
    calls->Start(impl_->Channel(part.shard).bulk.get(), part.shard,
                 impl_->options.servers[part.shard],
                 wire::EncodePullRequest(header, op->dedup.keys, part.rows));
  }
  calls->Seal([op](absl::Status status) {
    if (status.ok() && !op->dedup.distinct()) {
      const size_t dim = op->dim;
      for (size_t i = 0; i < op->dedup.position.size(); ++i) {
        std::memcpy(
            op->values.data() + i * dim,
            op->rows.data() + static_cast<size_t>(op->dedup.position[i]) * dim,
            dim * sizeof(float));
      }
    }
    op->done.set_value(std::move(status));
  });
  return result;
}

absl::Status Client::Push(const TableHandle& table,
                          absl::Span<const uint64_t> keys,
                          absl::Span<const float> grads, uint64_t step,
                          Keys keys_are) {
  return StartPush(table, keys, grads, step, keys_are).get();
}

std::future<absl::Status> Client::PushAsync(const TableHandle& table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<const float> grads,
                                            uint64_t step, Keys keys_are) {
  return StartPush(table, keys, grads, step, keys_are);
}

std::future<absl::Status> Client::StartPush(const TableHandle& table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<const float> grads,
                                            uint64_t step, Keys keys_are) {
  const size_t dim = table.dim;
  if (grads.size() != keys.size() * dim) {
    return Ready(absl::InvalidArgumentError(absl::StrCat(
        "Push of table '", table.name, "': ", keys.size(), " keys need ",
        keys.size() * dim, " gradients (dim ", dim, "), got ", grads.size())));
  }
  if (table.shard_table_ids.size() != static_cast<size_t>(num_shards())) {
    return Ready(
        absl::InvalidArgumentError("TableHandle is not from this client"));
  }
  if (keys.empty() && table.mode == proto::ConsistencyConfig::ASYNC) {
    return Ready(absl::OkStatus());
  }
  const Dedup dedup = Deduplicate(keys, keys_are);
  // Duplicate keys' gradients summed in batch order; without duplicates
  // the caller's gradients are sent as they are. Requests are built (and
  // the gradients copied into them) before this returns: the caller's
  // spans are not read afterwards.
  std::vector<float> summed;
  if (!dedup.distinct()) {
    summed.assign(dedup.keys.size() * dim, 0.0f);
    for (size_t i = 0; i < keys.size(); ++i) {
      float* sum = summed.data() + static_cast<size_t>(dedup.position[i]) * dim;
      const float* g = grads.data() + i * dim;
      for (size_t d = 0; d < dim; ++d) sum[d] += g[d];
    }
  }
  const float* const grad_base =
      dedup.distinct() ? grads.data() : summed.data();
  std::vector<Part> parts = SplitByShard(dedup.keys, num_shards(),
                                         impl_->options.max_keys_per_request);
  if (table.mode != proto::ConsistencyConfig::ASYNC) {
    CloseStepOnEveryShard(num_shards(), parts);
  }
  auto done = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = done->get_future();
  std::shared_ptr<BulkFanOut> calls = BulkFanOut::Create(
      impl_->push_path, "Push", impl_->options.retry, absl::ZeroDuration(),
      [](size_t, const grpc::ByteBuffer&) { return absl::OkStatus(); },
      [impl = impl_.get()](int32_t shard, const grpc::ClientContext& context) {
        return impl->CheckIncarnation(shard, context);
      });
  calls->set_reroute(impl_->Reroute());
  // Each part's call starts as soon as its request is built.
  for (const Part& part : parts) {
    proto::PushRequest header;
    header.set_table_id(table.shard_table_ids[part.shard]);
    header.set_value_type(impl_->options.wire_type);
    header.set_step(step);
    header.set_client_id(impl_->client_id);
    header.set_sequence(impl_->next_sequence.fetch_add(1));
    header.set_parts_in_step(part.parts_in_step);
    calls->Start(
        impl_->Channel(part.shard).bulk.get(), part.shard,
        impl_->options.servers[part.shard],
        wire::EncodePushRequest(header, dedup.keys, part.rows, grad_base, dim));
  }
  calls->Seal(
      [done](absl::Status status) { done->set_value(std::move(status)); });
  return result;
}

absl::StatusOr<std::unique_ptr<Client::PendingCheckpoint>>
Client::StartCheckpoint(const CheckpointOptions& options) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("a checkpoint needs a root directory");
  }
  auto pending = std::unique_ptr<PendingCheckpoint>(new PendingCheckpoint());
  pending->client_ = this;
  pending->root_ = options.root;
  pending->step_ = options.step;
  pending->keep_ = options.keep;
  pending->name_ = checkpoint::CheckpointName(options.step);
  const std::filesystem::path final_dir =
      std::filesystem::path(options.root) / pending->name_;
  pending->directory_ = final_dir.string() + checkpoint::kTemporarySuffix;
  std::error_code error;
  if (std::filesystem::exists(final_dir, error)) {
    return absl::AlreadyExistsError(
        absl::StrCat("checkpoint '", final_dir.string(), "' exists already"));
  }
  if (options.incremental) {
    absl::StatusOr<std::string> latest =
        checkpoint::ResolveCheckpoint(options.root);
    if (latest.ok()) {
      pending->parent_ = std::filesystem::path(*latest).filename().string();
    }
  }
  // Leftovers of an attempt that never finished are not a checkpoint.
  std::filesystem::remove_all(pending->directory_, error);
  std::filesystem::create_directories(pending->directory_, error);
  if (error) {
    return ErrnoStatus(
        error.value(),
        absl::StrCat("cannot create checkpoint directory '",
                     pending->directory_, "': ", error.message()));
  }
  // A refused checkpoint leaves nothing behind: the shards that took the
  // Save finish writing first, then the directory goes.
  std::vector<char> saving(num_shards(), 0);
  const auto abandon = [&](absl::Status status) {
    RunParts(num_shards(), [&](size_t shard) {
      if (!saving[shard]) return absl::OkStatus();
      proto::AwaitSaveRequest request;
      request.set_name(pending->name_);
      proto::AwaitSaveResponse ignored;
      return impl_->Call(
          static_cast<int32_t>(shard), "AwaitSave",
          [&](Impl::Stubs& stub, grpc::ClientContext* c) {
            return stub.training->AwaitSave(c, request, &ignored);
          },
          absl::Hours(1));
    }).IgnoreError();
    std::error_code ignored;
    std::filesystem::remove_all(pending->directory_, ignored);
    return status;
  };
  // The tables' specs, for the manifest (every shard has every table).
  proto::ListTablesResponse tables;
  if (absl::Status listed =
          impl_->Call(0, "ListTables",
                      [&](Impl::Stubs& stub, grpc::ClientContext* c) {
                        return stub.training->ListTables(
                            c, proto::ListTablesRequest(), &tables);
                      });
      !listed.ok()) {
    return abandon(listed);
  }
  for (const auto& entry : tables.table()) {
    pending->tables_.push_back(entry.config());
  }
  std::vector<double> pauses(num_shards(), 0.0);
  const absl::Status saved = RunParts(num_shards(), [&](size_t shard) {
    proto::SaveRequest request;
    request.set_directory(pending->directory_);
    request.set_name(pending->name_);
    request.set_parent(pending->parent_);
    request.set_step(options.step);
    request.set_incremental(options.incremental);
    proto::SaveResponse response;
    RETURN_IF_ERROR(impl_->Call(static_cast<int32_t>(shard), "Save",
                                [&](Impl::Stubs& stub, grpc::ClientContext* c) {
                                  return stub.training->Save(c, request,
                                                             &response);
                                }));
    pauses[shard] = response.pause_seconds();
    saving[shard] = 1;
    return absl::OkStatus();
  });
  if (!saved.ok()) return abandon(saved);
  pending->pause_seconds_ = *std::max_element(pauses.begin(), pauses.end());
  return pending;
}

absl::StatusOr<proto::CheckpointManifest> Client::PendingCheckpoint::Finish(
    const std::vector<std::string>& extra_files) {
  Impl& impl = *client_->impl_;
  const int32_t shards = client_->num_shards();
  std::vector<proto::AwaitSaveResponse> saved(shards);
  // A checkpoint that cannot be finished leaves nothing behind.
  const auto abandon = [&](absl::Status status) {
    std::error_code ignored;
    std::filesystem::remove_all(directory_, ignored);
    return status;
  };
  const absl::Status written = RunParts(shards, [&](size_t shard) {
    proto::AwaitSaveRequest request;
    request.set_name(name_);
    // The shard holds the call until its files are written.
    return impl.Call(
        static_cast<int32_t>(shard), "AwaitSave",
        [&](Impl::Stubs& stub, grpc::ClientContext* c) {
          return stub.training->AwaitSave(c, request, &saved[shard]);
        },
        absl::Hours(1));
  });
  if (!written.ok()) return abandon(written);
  absl::StatusOr<proto::CheckpointManifest> manifest =
      checkpoint::AssembleManifest(directory_, name_, step_, parent_, tables_,
                                   saved, extra_files);
  if (!manifest.ok()) return abandon(manifest.status());
  if (absl::Status wrote = checkpoint::WriteManifest(directory_, *manifest);
      !wrote.ok()) {
    return abandon(wrote);
  }
  const std::string final_dir = (std::filesystem::path(root_) / name_).string();
  if (std::rename(directory_.c_str(), final_dir.c_str()) != 0) {
    const int error = errno;
    return ErrnoStatus(
        error, absl::StrCat("cannot rename '", directory_, "' to '", final_dir,
                            "': ", std::strerror(error)));
  }
  RETURN_IF_ERROR(SyncPath(root_));
  directory_ = final_dir;
  if (keep_ > 0) {
    absl::StatusOr<checkpoint::PruneResult> pruned =
        checkpoint::PruneCheckpoints(root_, keep_);
    if (pruned.ok()) {
      pruned_ = pruned->deleted;
    } else {
      prune_status_ = pruned.status();
    }
  }
  return manifest;
}

absl::StatusOr<proto::CheckpointManifest> Client::Checkpoint(
    const CheckpointOptions& options) {
  ASSIGN_OR_RETURN(auto pending, StartCheckpoint(options));
  return pending->Finish();
}

absl::StatusOr<proto::LoadResponse> Client::Load(const std::string& path) {
  // All or nothing across shards: every shard restores aside (PREPARE);
  // only when all did do they make it visible (COMMIT); else each drops
  // what it prepared (ABORT).
  const std::string transaction = absl::StrCat(
      absl::Hex(impl_->client_id), "-", impl_->next_sequence.fetch_add(1));
  const auto each_shard = [&](proto::LoadRequest::Phase phase,
                              std::vector<proto::LoadResponse>* responses) {
    return RunParts(num_shards(), [&](size_t shard) {
      proto::LoadRequest request;
      request.set_path(path);
      request.set_phase(phase);
      request.set_transaction(transaction);
      proto::LoadResponse ignored;
      return impl_->Call(
          static_cast<int32_t>(shard), "Load",
          [&](Impl::Stubs& stub, grpc::ClientContext* c) {
            return stub.training->Load(
                c, request,
                responses != nullptr ? &(*responses)[shard] : &ignored);
          },
          absl::Hours(1));
    });
  };
  std::vector<proto::LoadResponse> responses(num_shards());
  if (absl::Status prepared =
          each_shard(proto::LoadRequest::PREPARE, &responses);
      !prepared.ok()) {
    each_shard(proto::LoadRequest::ABORT, nullptr).IgnoreError();
    return prepared;
  }
  if (absl::Status committed = each_shard(proto::LoadRequest::COMMIT, nullptr);
      !committed.ok()) {
    return absl::Status(
        committed.code(),
        absl::StrCat(committed.message(),
                     " (the Load was prepared on every shard but not "
                     "committed on every one: Load again into empty servers)"));
  }
  uint64_t rows = 0;
  for (const proto::LoadResponse& r : responses) rows += r.rows();
  proto::LoadResponse total = responses[0];
  total.set_rows(rows);
  return total;
}

absl::StatusOr<uint64_t> Client::Publish(uint64_t step,
                                         const std::string& dense_parameters) {
  std::vector<uint64_t> rows(num_shards(), 0);
  RETURN_IF_ERROR(RunParts(num_shards(), [&](size_t shard) {
    proto::PublishRequest request;
    request.set_step(step);
    if (shard == 0) request.set_dense_parameters(dense_parameters);
    proto::PublishResponse response;
    // A SYNC shard holds the call until the step is applied.
    RETURN_IF_ERROR(impl_->Call(
        static_cast<int32_t>(shard), "Publish",
        [&](Impl::Stubs& stub, grpc::ClientContext* c) {
          return stub.training->Publish(c, request, &response);
        },
        absl::Minutes(5)));
    rows[shard] = response.rows();
    return absl::OkStatus();
  }));
  uint64_t total = 0;
  for (uint64_t r : rows) total += r;
  return total;
}

absl::StatusOr<std::vector<uint64_t>> Client::Erase(
    const TableHandle& table, absl::Span<const uint64_t> keys) {
  std::vector<uint64_t> unique(keys.begin(), keys.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  std::vector<std::vector<uint64_t>> by_shard(num_shards());
  for (uint64_t key : unique) {
    by_shard[ShardOfKey(key, num_shards())].push_back(key);
  }
  std::vector<uint64_t> erased(num_shards(), 0);
  RETURN_IF_ERROR(RunParts(num_shards(), [&](size_t shard) {
    const std::vector<uint64_t>& mine = by_shard[shard];
    for (size_t begin = 0; begin < mine.size();
         begin += impl_->options.max_keys_per_request) {
      const size_t count =
          std::min(mine.size() - begin, impl_->options.max_keys_per_request);
      proto::EraseRequest request;
      request.set_table_id(table.shard_table_ids[shard]);
      request.set_keys(reinterpret_cast<const char*>(mine.data() + begin),
                       count * sizeof(uint64_t));
      proto::EraseResponse response;
      RETURN_IF_ERROR(
          impl_->Call(static_cast<int32_t>(shard), "Erase",
                      [&](Impl::Stubs& stub, grpc::ClientContext* c) {
                        return stub.training->Erase(c, request, &response);
                      }));
      erased[shard] += response.erased();
    }
    return absl::OkStatus();
  }));
  return erased;
}

absl::StatusOr<std::vector<proto::StatsResponse>> Client::Stats() {
  std::vector<proto::StatsResponse> responses(num_shards());
  const absl::Status status = RunParts(num_shards(), [&](size_t shard) {
    proto::StatsRequest request;
    return impl_->Call(static_cast<int32_t>(shard), "Stats",
                       [&](Impl::Stubs& stub, grpc::ClientContext* context) {
                         return stub.stats->Stats(context, request,
                                                  &responses[shard]);
                       });
  });
  if (!status.ok()) return status;
  return responses;
}

}  // namespace embedps::client
