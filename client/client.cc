#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/bulk_fan_out.h"
#include "client/client_impl.h"
#include "client/identity_check.h"
#include "common/key_hash.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/stats.grpc.pb.h"
#include "proto/training.grpc.pb.h"
#include "wire/bulk_codec.h"
#include "wire/keepalive.h"
#include "wire/server_identity.h"

namespace embedps::client {

namespace client_internal {

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

}  // namespace client_internal

namespace {

using client_internal::MethodPath;
using client_internal::Part;
using client_internal::RunParts;
using client_internal::SplitByShard;

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

}  // namespace

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() {
  // Pulls and Pushes still in flight (asynchronous ones nobody waited
  // for, e.g. a job stopping on an error) end before the channels go.
  if (impl_ != nullptr) impl_->CancelAndWaitForFanOuts();
}

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
  // A server cut off is found in seconds (its calls then fail over).
  wire::PingWhileCallsAreOpen(args);
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

absl::Status Client::Impl::CheckServers() {
  if (servers_checked.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  MutexLock lock(&check_mu);
  if (servers_checked.load(std::memory_order_acquire)) {
    return absl::OkStatus();
  }
  std::vector<StatedIdentity> stated(routes.size());
  RETURN_IF_ERROR(RunParts(routes.size(), [&](size_t shard) {
    stated[shard].address = options.servers[shard];
    return Call(static_cast<int32_t>(shard), "Identify",
                [&](Stubs& stub, grpc::ClientContext* context) {
                  return stub.stats->Identify(context, proto::IdentifyRequest(),
                                              &stated[shard].identity);
                });
  }));
  RETURN_IF_ERROR(CheckIdentities(stated, proto::ServerIdentity::TRAINING,
                                  options.cluster_id));
  servers_checked.store(true, std::memory_order_release);
  return absl::OkStatus();
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
  handle.config = std::make_shared<const proto::TableConfig>(config);
  handle.step_timeout =
      handle.mode == proto::ConsistencyConfig::ASYNC ? absl::ZeroDuration()
      : config.consistency().timeout_ms() == 0
          ? absl::Seconds(60)
          : absl::Milliseconds(config.consistency().timeout_ms());
  return handle;
}

}  // namespace

absl::StatusOr<TableHandle> Client::OpenTable(const std::string& name) {
  RETURN_IF_ERROR(impl_->CheckServers());
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
  RETURN_IF_ERROR(impl_->CheckServers());
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
  RETURN_IF_ERROR(impl_->CheckServers());
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

struct Client::CallCanceller::State {
  Mutex mu;
  bool cancelled ABSL_GUARDED_BY(mu) = false;
  std::weak_ptr<BulkFanOut> fan_out ABSL_GUARDED_BY(mu);
};

Client::CallCanceller::CallCanceller() : state_(std::make_shared<State>()) {}
Client::CallCanceller::~CallCanceller() = default;

void Client::CallCanceller::Cancel() {
  std::shared_ptr<BulkFanOut> fan_out;
  {
    MutexLock lock(&state_->mu);
    state_->cancelled = true;
    fan_out = state_->fan_out.lock();
  }
  if (fan_out != nullptr) fan_out->Cancel();
}

std::future<absl::Status> Client::PullAsync(const TableHandle& table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<float> values,
                                            uint64_t step, Keys keys_are,
                                            CallCanceller* canceller) {
  return StartPull(table, keys, values, step, /*read_only=*/false, keys_are,
                   canceller);
}

std::future<absl::Status> Client::LookupAsync(const TableHandle& table,
                                              absl::Span<const uint64_t> keys,
                                              absl::Span<float> values,
                                              uint64_t step, Keys keys_are,
                                              CallCanceller* canceller) {
  return StartPull(table, keys, values, step, /*read_only=*/true, keys_are,
                   canceller);
}

std::future<absl::Status> Client::StartPull(const TableHandle& table,
                                            absl::Span<const uint64_t> keys,
                                            absl::Span<float> values,
                                            uint64_t step, bool read_only,
                                            Keys keys_are,
                                            CallCanceller* canceller) {
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
  if (absl::Status checked = impl_->CheckServers(); !checked.ok()) {
    return Ready(std::move(checked));
  }
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
  const uint64_t tracked = impl_->Track(calls);
  if (canceller != nullptr) {
    bool cancelled;
    {
      MutexLock lock(&canceller->state_->mu);
      canceller->state_->fan_out = calls;
      cancelled = canceller->state_->cancelled;
    }
    if (cancelled) calls->Cancel();
  }
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
  calls->Seal([op, impl = impl_.get(), tracked](absl::Status status) {
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
    impl->Untrack(tracked);
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
  if (absl::Status checked = impl_->CheckServers(); !checked.ok()) {
    return Ready(std::move(checked));
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
  const uint64_t tracked = impl_->Track(calls);
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
  calls->Seal([done, impl = impl_.get(), tracked](absl::Status status) {
    done->set_value(std::move(status));
    impl->Untrack(tracked);
  });
  return result;
}

}  // namespace embedps::client
