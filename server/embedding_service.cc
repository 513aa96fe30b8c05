#include "server/embedding_service.h"

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/bulk_message.h"
#include "common/float16.h"
#include "common/grpc_status.h"
#include "common/key_hash.h"
#include "common/status_macros.h"
#include "embedding/initializer.h"
#include "embedding/table_digest.h"

namespace embedps::server {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the wire is little-endian and decoded by memcpy");

size_t ValueBytes(proto::ValueType type) {
  return type == proto::FLOAT16 ? sizeof(uint16_t) : sizeof(float);
}

const char* ValueTypeName(proto::ValueType type) {
  return type == proto::FLOAT16 ? "float16" : "float32";
}

}  // namespace

const char* RejectionName(Rejection reason) {
  switch (reason) {
    case Rejection::kUnknownTable:
      return "unknown_table";
    case Rejection::kEmptyRequest:
      return "empty_request";
    case Rejection::kMalformedKeys:
      return "malformed_keys";
    case Rejection::kSizeMismatch:
      return "size_mismatch";
    case Rejection::kNonFinite:
      return "non_finite_gradient";
    case Rejection::kOverLimit:
      return "over_limit";
    case Rejection::kWrongShard:
      return "wrong_shard";
    case Rejection::kBadValueType:
      return "bad_value_type";
    case Rejection::kInvalidSpec:
      return "invalid_spec";
    case Rejection::kSpecConflict:
      return "spec_conflict";
    case Rejection::kLateStep:
      return "late_step";
    case Rejection::kMalformedRequest:
      return "malformed_request";
    case Rejection::kCount:
      break;
  }
  return "unknown";
}

EmbeddingServiceImpl::EmbeddingServiceImpl(ShardOptions options,
                                           TableRegistry* registry,
                                           ShardCheckpointer* checkpointer,
                                           RpcMetrics* metrics)
    : options_(options),
      registry_(registry),
      checkpointer_(checkpointer),
      metrics_(metrics) {}

grpc::Status EmbeddingServiceImpl::Reject(Rejection reason,
                                          const absl::Status& status) {
  rejected_[static_cast<size_t>(reason)].fetch_add(1,
                                                   std::memory_order_relaxed);
  return ToGrpcStatus(status);
}

namespace {

// Shared checks of Pull and Push: the keys are whole uint64s, there are
// some (unless `allow_empty`) but not too many, and each belongs to this
// shard. On failure `*rejection` says why.
absl::StatusOr<std::vector<uint64_t>> DecodeKeys(const BulkBytes& bytes,
                                                 const ShardOptions& options,
                                                 bool allow_empty,
                                                 Rejection* rejection) {
  if (bytes.size() % sizeof(uint64_t) != 0) {
    *rejection = Rejection::kMalformedKeys;
    return absl::InvalidArgumentError(absl::StrCat(
        "keys must be packed little-endian uint64 (8 bytes each); got ",
        bytes.size(), " bytes, not a multiple of 8"));
  }
  const size_t n = bytes.size() / sizeof(uint64_t);
  if (n == 0 && !allow_empty) {
    *rejection = Rejection::kEmptyRequest;
    return absl::InvalidArgumentError("empty request: no keys");
  }
  if (n > options.max_keys_per_request) {
    *rejection = Rejection::kOverLimit;
    return absl::ResourceExhaustedError(
        absl::StrCat(n, " keys in one request; this server takes at most ",
                     options.max_keys_per_request,
                     " (--max_keys_per_request): split the batch"));
  }
  std::vector<uint64_t> keys(n);
  if (n > 0) bytes.CopyTo(keys.data());
  if (options.num_shards > 1) {
    for (uint64_t key : keys) {
      const int32_t shard = ShardOfKey(key, options.num_shards);
      if (shard != options.shard_index) {
        *rejection = Rejection::kWrongShard;
        return absl::FailedPreconditionError(absl::StrCat(
            "key ", key, " belongs to shard ", shard, " of ",
            options.num_shards, ", but this is shard ", options.shard_index,
            ": the client's shard list or count is wrong"));
      }
    }
  }
  return keys;
}

absl::Status UnknownValueType(int type) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown value_type ", type, " (FLOAT32 = 0, FLOAT16 = 1)"));
}

}  // namespace

grpc::Status EmbeddingServiceImpl::CreateTableImpl(
    grpc::ServerContext*, const proto::CreateTableRequest* request,
    proto::CreateTableResponse* response) {
  absl::StatusOr<TableRegistry::CreateResult> result =
      registry_->Create(request->config());
  if (!result.ok()) {
    return Reject(
        result.status().code() == absl::StatusCode::kFailedPrecondition
            ? Rejection::kSpecConflict
            : Rejection::kInvalidSpec,
        result.status());
  }
  response->set_table_id(result->table_id);
  response->set_created(result->created);
  return grpc::Status::OK;
}

grpc::Status EmbeddingServiceImpl::ListTablesImpl(
    grpc::ServerContext*, const proto::ListTablesRequest*,
    proto::ListTablesResponse* response) {
  for (const TableRegistry::Entry& entry : registry_->List()) {
    proto::ListTablesResponse::Entry* out = response->add_table();
    out->set_table_id(entry.table_id);
    *out->mutable_config() = *entry.config;
  }
  return grpc::Status::OK;
}

grpc::Status EmbeddingServiceImpl::ParsePull(const grpc::ByteBuffer& request,
                                             PullCall* call) {
  absl::StatusOr<std::vector<BulkBytes>> bulk = ParseBulkMessage(
      request, {proto::PullRequest::kKeysFieldNumber}, &call->header);
  if (!bulk.ok()) return Reject(Rejection::kMalformedRequest, bulk.status());
  const proto::PullRequest& header = call->header;
  absl::StatusOr<TableRegistry::Entry> entry =
      registry_->Find(header.table_id());
  if (!entry.ok()) return Reject(Rejection::kUnknownTable, entry.status());
  call->entry = *entry;
  if (!proto::ValueType_IsValid(header.value_type())) {
    return Reject(Rejection::kBadValueType,
                  UnknownValueType(header.value_type()));
  }
  Rejection rejection;
  absl::StatusOr<std::vector<uint64_t>> keys =
      DecodeKeys((*bulk)[0], options_, /*allow_empty=*/false, &rejection);
  if (!keys.ok()) return Reject(rejection, keys.status());
  call->keys = *std::move(keys);
  return grpc::Status::OK;
}

grpc::Status EmbeddingServiceImpl::ServePull(const PullCall& call,
                                             grpc::ByteBuffer* response) {
  const proto::PullRequest& request = call.header;
  embedding::Table* const table = call.entry.table;
  const std::vector<uint64_t>& keys = call.keys;
  if (call.entry.synchronizer != nullptr) {
    const absl::Status ready =
        call.entry.synchronizer->AwaitPullable(request.step());
    if (!ready.ok()) return ToGrpcStatus(ready);
  }

  const size_t dim = table->spec().dim;
  const size_t floats = keys.size() * dim;
  const embedding::AccessContext context{request.step()};
  const auto read = [&](absl::Span<float> out) -> absl::Status {
    if (!request.read_only()) return table->Pull(keys, out, context);
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    RETURN_IF_ERROR(
        table->Lookup(keys, out, absl::MakeSpan(found.get(), keys.size()))
            .status());
    const embedding::TableSpec& spec = table->spec();
    for (size_t i = 0; i < keys.size(); ++i) {
      if (found[i]) continue;
      embedding::InitialRow(spec.initializer, spec.seed, keys[i],
                            out.subspan(i * dim, dim));
    }
    return absl::OkStatus();
  };
  // The values are pulled (float32) or narrowed (float16) straight into
  // the buffer that goes out.
  OwnedBytes values(floats * ValueBytes(request.value_type()));
  if (request.value_type() == proto::FLOAT32) {
    const absl::Status status =
        read(absl::MakeSpan(reinterpret_cast<float*>(values.data()), floats));
    if (!status.ok()) return ToGrpcStatus(status);
  } else {
    // Uninitialized (the Pull writes every value): zeroing tens of MB
    // first would be a pass for nothing.
    const std::unique_ptr<float[]> pulled(new float[floats]);
    const absl::Span<float> pulled_span(pulled.get(), floats);
    const absl::Status status = read(pulled_span);
    if (!status.ok()) return ToGrpcStatus(status);
    FloatsToHalves(pulled_span, reinterpret_cast<uint16_t*>(values.data()));
  }
  std::vector<BulkField> fields;
  fields.push_back({proto::PullResponse::kValuesFieldNumber,
                    std::move(values).ReleaseToSlice()});
  *response = SerializeBulkMessage(proto::PullResponse(), std::move(fields));
  return grpc::Status::OK;
}

grpc::Status EmbeddingServiceImpl::PushImpl(const grpc::ByteBuffer& bytes,
                                            grpc::ByteBuffer* response) {
  proto::PushRequest request;
  absl::StatusOr<std::vector<BulkBytes>> bulk =
      ParseBulkMessage(bytes,
                       {proto::PushRequest::kKeysFieldNumber,
                        proto::PushRequest::kGradientsFieldNumber},
                       &request);
  if (!bulk.ok()) return Reject(Rejection::kMalformedRequest, bulk.status());
  const BulkBytes& gradients = (*bulk)[1];
  absl::StatusOr<TableRegistry::Entry> entry =
      registry_->Find(request.table_id());
  if (!entry.ok()) return Reject(Rejection::kUnknownTable, entry.status());
  embedding::Table* const table = entry->table;
  if (!proto::ValueType_IsValid(request.value_type())) {
    return Reject(Rejection::kBadValueType,
                  UnknownValueType(request.value_type()));
  }
  // In SYNC and SSP a part that only closes a step may carry no keys.
  const bool closes_step =
      entry->synchronizer != nullptr && request.parts_in_step() > 0;
  Rejection rejection;
  absl::StatusOr<std::vector<uint64_t>> keys =
      DecodeKeys((*bulk)[0], options_, closes_step, &rejection);
  if (!keys.ok()) return Reject(rejection, keys.status());

  const size_t dim = table->spec().dim;
  const size_t floats = keys->size() * dim;
  const size_t want_bytes = floats * ValueBytes(request.value_type());
  if (gradients.size() != want_bytes) {
    return Reject(Rejection::kSizeMismatch,
                  absl::InvalidArgumentError(absl::StrCat(
                      keys->size(), " keys of table '", table->spec().name,
                      "' (dim ", dim, ") need ", want_bytes, " bytes of ",
                      ValueTypeName(request.value_type()), " gradients, got ",
                      gradients.size())));
  }
  // Exactly once: a retry of an applied Push gets the first outcome.
  const PushDeduplicator::Decision decision =
      deduplicator_.Begin(request.client_id(), request.sequence());
  if (decision.kind == PushDeduplicator::Decision::kDone) {
    return ToGrpcStatus(decision.status);
  }
  // float32 gradients are read in place when they arrived in one aligned
  // piece, else gathered into `copied`; float16 ones are widened into it.
  // (Uninitialized: every float is written before it is read.)
  std::unique_ptr<float[]> copied;
  absl::Span<const float> grads;
  if (request.value_type() == proto::FLOAT32 &&
      gradients.chunks().size() == 1 &&
      reinterpret_cast<uintptr_t>(gradients.chunks()[0].data()) %
              alignof(float) ==
          0) {
    grads = absl::MakeConstSpan(
        reinterpret_cast<const float*>(gradients.chunks()[0].data()), floats);
  } else if (request.value_type() == proto::FLOAT32) {
    copied.reset(new float[floats]);
    if (floats > 0) gradients.CopyTo(copied.get());
    grads = absl::MakeConstSpan(copied.get(), floats);
  } else {
    const std::unique_ptr<uint16_t[]> halves(new uint16_t[floats]);
    if (floats > 0) gradients.CopyTo(halves.get());
    copied.reset(new float[floats]);
    HalvesToFloats(absl::MakeConstSpan(halves.get(), floats), copied.get());
    grads = absl::MakeConstSpan(copied.get(), floats);
  }
  const absl::Status status =
      entry->synchronizer != nullptr
          ? entry->synchronizer->Push(request.client_id(), request.step(),
                                      request.parts_in_step(), *keys, grads)
          : table->Push(*keys, grads, embedding::AccessContext{request.step()});
  deduplicator_.Finish(request.client_id(), request.sequence(), status);
  if (!status.ok()) {
    // Sizes were checked above: what remains is NaN/Inf gradients
    // (INVALID_ARGUMENT), a SYNC step pushed after it was applied
    // (FAILED_PRECONDITION), or no memory.
    const Rejection reason =
        status.code() == absl::StatusCode::kInvalidArgument
            ? Rejection::kNonFinite
        : status.code() == absl::StatusCode::kFailedPrecondition
            ? Rejection::kLateStep
            : Rejection::kOverLimit;
    return Reject(reason, status);
  }
  if (options_.TEST_drop_push_response_probability > 0) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    if (std::uniform_real_distribution<double>(0, 1)(rng) <
        options_.TEST_drop_push_response_probability) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "TEST: push applied, response dropped on purpose");
    }
  }
  return grpc::Status::OK;
}

grpc::Status EmbeddingServiceImpl::StatsImpl(grpc::ServerContext*,
                                             const proto::StatsRequest* request,
                                             proto::StatsResponse* response) {
  response->set_shard_index(options_.shard_index);
  response->set_num_shards(options_.num_shards);
  std::vector<TableRegistry::Entry> entries;
  if (request->table_id().empty()) {
    entries = registry_->List();
  } else {
    for (uint32_t id : request->table_id()) {
      absl::StatusOr<TableRegistry::Entry> entry = registry_->Find(id);
      if (!entry.ok()) return Reject(Rejection::kUnknownTable, entry.status());
      entries.push_back(*entry);
    }
  }
  for (const TableRegistry::Entry& entry : entries) {
    const embedding::TableStats s = entry.table->Stats();
    proto::TableStatsProto* out = response->add_table();
    out->set_table_id(entry.table_id);
    out->set_name(entry.table->spec().name);
    out->set_rows(s.rows);
    out->set_resident_bytes(s.resident_bytes);
    out->set_payload_bytes(s.payload_bytes);
    out->set_memory_budget_bytes(s.memory_budget_bytes);
    out->set_over_budget(s.over_budget);
    out->set_admitted(s.admitted);
    out->set_admission_rejected(s.admission_rejected);
    out->set_pushes_dropped(s.pushes_dropped);
    out->set_evicted(s.evicted);
    out->set_erased(s.erased);
    out->set_pulled_keys(s.pulled_keys);
    out->set_pushed_keys(s.pushed_keys);
    out->set_looked_up_keys(s.looked_up_keys);
    out->set_pull_requests(s.pull_requests);
    out->set_push_requests(s.push_requests);
    out->set_lookup_requests(s.lookup_requests);
    out->set_resident_rows(s.resident_rows);
    out->set_spilled_rows(s.spilled_rows);
    out->set_spilled_disk_bytes(s.spilled_disk_bytes);
    out->set_spills(s.spills);
    out->set_promotions(s.promotions);
    out->set_spills_of_unchanged_rows(s.spills_of_unchanged_rows);
    out->set_spills_of_newcomers(s.spills_of_newcomers);
    out->set_spill_multigets(s.spill_multigets);
    out->set_spill_multiget_keys(s.spill_multiget_keys);
    out->set_spill_multiget_seconds(s.spill_multiget_micros * 1e-6);
    if (request->content_digest()) {
      absl::StatusOr<embedding::TableDigest> digest =
          embedding::DigestTable(*entry.table);
      if (!digest.ok()) return ToGrpcStatus(digest.status());
      out->set_content_digest(digest->digest);
    }
  }
  response->set_duplicate_pushes(deduplicator_.duplicates());
  metrics_->Fill(response);
  for (size_t r = 0; r < rejected_.size(); ++r) {
    (*response->mutable_rejected_requests())[RejectionName(
        static_cast<Rejection>(r))] =
        rejected_[r].load(std::memory_order_relaxed);
  }
  return grpc::Status::OK;
}

grpc::Status EmbeddingServiceImpl::CreateTable(
    grpc::ServerContext* context, const proto::CreateTableRequest* request,
    proto::CreateTableResponse* response) {
  return metrics_->Measure(RpcMethod::kCreateTable, [&] {
    return CreateTableImpl(context, request, response);
  });
}

grpc::Status EmbeddingServiceImpl::ListTables(
    grpc::ServerContext* context, const proto::ListTablesRequest* request,
    proto::ListTablesResponse* response) {
  return metrics_->Measure(RpcMethod::kListTables, [&] {
    return ListTablesImpl(context, request, response);
  });
}

namespace {

// Finishes a bulk call. An OK answer must carry a message: one that did not
// set it (a Push acknowledged as a retry) sends the empty message.
void FinishBulkCall(grpc::ServerUnaryReactor* reactor,
                    const grpc::Status& status, grpc::ByteBuffer* response) {
  if (status.ok() && !response->Valid()) {
    grpc::Slice empty_message;
    *response = grpc::ByteBuffer(&empty_message, 1);
  }
  reactor->Finish(status);
}

}  // namespace

grpc::ServerUnaryReactor* EmbeddingServiceImpl::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
  auto timer = std::make_unique<RpcMetrics::Timer>(metrics_, RpcMethod::kPull);
  auto call = std::make_unique<PullCall>();
  grpc::Status status = ParsePull(*request, call.get());
  // Usually the step is pullable when its Pull arrives; only a Pull that
  // must wait leaves gRPC's thread.
  if (status.ok() && call->entry.synchronizer != nullptr &&
      !call->entry.synchronizer->Pullable(call->header.step())) {
    RunDetached([this, reactor, response, timer = std::move(timer),
                 call = std::move(call)] {
      const grpc::Status served = ServePull(*call, response);
      timer->set_ok(served.ok());
      FinishBulkCall(reactor, served, response);
    });
    return reactor;
  }
  if (status.ok()) status = ServePull(*call, response);
  timer->set_ok(status.ok());
  FinishBulkCall(reactor, status, response);
  return reactor;
}

grpc::ServerUnaryReactor* EmbeddingServiceImpl::Push(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
  FinishBulkCall(
      reactor,
      metrics_->Measure(RpcMethod::kPush,
                        [&] { return PushImpl(*request, response); }),
      response);
  return reactor;
}

void EmbeddingServiceImpl::RunDetached(absl::AnyInvocable<void() &&> work) {
  {
    std::lock_guard<std::mutex> lock(detached_mu_);
    ++detached_running_;
  }
  std::thread([this, work = std::move(work)]() mutable {
    std::move(work)();
    work = nullptr;  // what it held goes before the service may
    std::lock_guard<std::mutex> lock(detached_mu_);
    if (--detached_running_ == 0) detached_done_.notify_all();
  }).detach();
}

EmbeddingServiceImpl::~EmbeddingServiceImpl() {
  std::unique_lock<std::mutex> lock(detached_mu_);
  detached_done_.wait(lock, [&] { return detached_running_ == 0; });
}

grpc::Status EmbeddingServiceImpl::Stats(grpc::ServerContext* context,
                                         const proto::StatsRequest* request,
                                         proto::StatsResponse* response) {
  return metrics_->Measure(
      RpcMethod::kStats, [&] { return StatsImpl(context, request, response); });
}

grpc::Status EmbeddingServiceImpl::Save(grpc::ServerContext*,
                                        const proto::SaveRequest* request,
                                        proto::SaveResponse* response) {
  return metrics_->Measure(RpcMethod::kSave, [&] {
    absl::StatusOr<double> pause = checkpointer_->Save(*request);
    if (!pause.ok()) return ToGrpcStatus(pause.status());
    response->set_pause_seconds(*pause);
    return grpc::Status::OK;
  });
}

grpc::Status EmbeddingServiceImpl::AwaitSave(
    grpc::ServerContext*, const proto::AwaitSaveRequest* request,
    proto::AwaitSaveResponse* response) {
  return metrics_->Measure(RpcMethod::kAwaitSave, [&] {
    absl::StatusOr<proto::AwaitSaveResponse> saved =
        checkpointer_->AwaitSave(request->name());
    if (!saved.ok()) return ToGrpcStatus(saved.status());
    *response = *std::move(saved);
    return grpc::Status::OK;
  });
}

grpc::Status EmbeddingServiceImpl::Load(grpc::ServerContext*,
                                        const proto::LoadRequest* request,
                                        proto::LoadResponse* response) {
  return metrics_->Measure(RpcMethod::kLoad, [&] {
    absl::StatusOr<proto::LoadResponse> loaded =
        checkpointer_->Restore(request->path());
    if (!loaded.ok()) return ToGrpcStatus(loaded.status());
    *response = *std::move(loaded);
    return grpc::Status::OK;
  });
}

proto::StatsResponse EmbeddingServiceImpl::CollectStats() {
  proto::StatsResponse response;
  const proto::StatsRequest all_tables;
  StatsImpl(nullptr, &all_tables, &response);
  return response;
}

}  // namespace embedps::server
