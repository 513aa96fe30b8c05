// TrainingServiceImpl's key-addressed calls: Pull and Push (the bulk wire,
// their checks, SYNC waits, forwarding to backups) and Erase.
#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/for_each_part.h"
#include "common/key_hash.h"
#include "common/status_macros.h"
#include "embedding/table.h"
#include "embedding/table_spec.h"
#include "server/key_checks.h"
#include "server/table_config.h"
#include "server/training_service.h"
#include "wire/bulk_codec.h"
#include "wire/grpc_status.h"
#include "wire/server_identity.h"
namespace embedps::server {

namespace {

// Keys a piece of a Pull split over threads takes at least.
constexpr size_t kKeysPerPullThread = 16384;

// Runs read(keys, values) over `keys` in pieces on up to `threads`
// threads (the table is thread-safe and the pieces write disjoint rows of
// `values`); the first error.
absl::Status InPieces(
    int32_t threads, size_t dim, absl::Span<const uint64_t> keys,
    absl::Span<float> values,
    const std::function<absl::Status(absl::Span<const uint64_t>,
                                     absl::Span<float>)>& read) {
  const int parts = static_cast<int>(
      std::min<size_t>(std::max(threads, 1),
                       std::max<size_t>(1, keys.size() / kKeysPerPullThread)));
  if (parts == 1) return read(keys, values);
  std::vector<absl::Status> status(parts);
  ForEachPart(parts, [&](int p) {
    const size_t begin = keys.size() * p / parts;
    const size_t end = keys.size() * (p + 1) / parts;
    status[p] = read(keys.subspan(begin, end - begin),
                     values.subspan(begin * dim, (end - begin) * dim));
  });
  for (absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// The rows of `keys` without counting an access or an admission; a key
// without a row reads as its initial values, what a Pull would create.
absl::Status ReadValues(embedding::Table& table,
                        absl::Span<const uint64_t> keys,
                        absl::Span<float> values, int32_t threads = 1) {
  return InPieces(
      threads, table.spec().dim, keys, values,
      [&](absl::Span<const uint64_t> piece, absl::Span<float> piece_values) {
        std::unique_ptr<bool[]> found(new bool[piece.size()]);
        return table
            .Lookup(piece, piece_values,
                    absl::MakeSpan(found.get(), piece.size()),
                    embedding::Table::MissingRows::kInitialValues)
            .status();
      });
}

// A Pull of `keys` (creating rows as admission allows), in pieces.
absl::Status PullValues(embedding::Table& table,
                        absl::Span<const uint64_t> keys,
                        absl::Span<float> values, uint64_t step,
                        int32_t threads) {
  return InPieces(
      threads, table.spec().dim, keys, values,
      [&](absl::Span<const uint64_t> piece, absl::Span<float> piece_values) {
        return table.Pull(piece, piece_values, embedding::AccessContext{step});
      });
}

}  // namespace

namespace {

// Shared checks of Pull and Push: the keys are whole uint64s, there are
// some (unless `allow_empty`) but not too many, and each belongs to this
// shard. On failure `*rejection` says why.
absl::StatusOr<std::vector<uint64_t>> CheckedKeys(
    const wire::BulkBytes& bytes, const TrainingServiceOptions& options,
    bool allow_empty, Rejection* rejection) {
  absl::StatusOr<size_t> n = wire::KeyCount(bytes);
  if (!n.ok()) {
    *rejection = Rejection::kMalformedKeys;
    return n.status();
  }
  RETURN_IF_ERROR(CheckKeyCount(*n, options, allow_empty, rejection));
  std::vector<uint64_t> keys = wire::CopyKeys(bytes);
  RETURN_IF_ERROR(CheckKeyShards(keys, options, rejection));
  return keys;
}

}  // namespace

grpc::Status TrainingServiceImpl::ParsePull(const grpc::ByteBuffer& request,
                                            PullCall* call) {
  if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
    return wire::ToGrpcStatus(serves);
  }
  absl::StatusOr<wire::PullRequestView> view = wire::ParsePullRequest(request);
  if (!view.ok())
    return rejections_.Reject(Rejection::kMalformedRequest, view.status());
  call->header = std::move(view->header);
  absl::StatusOr<TableRegistry::Entry> entry =
      registry_->Find(call->header.table_id());
  if (!entry.ok())
    return rejections_.Reject(Rejection::kUnknownTable, entry.status());
  call->entry = *entry;
  if (absl::Status type = wire::CheckValueType(call->header.value_type());
      !type.ok()) {
    return rejections_.Reject(Rejection::kBadValueType, type);
  }
  Rejection rejection;
  absl::StatusOr<std::vector<uint64_t>> keys =
      CheckedKeys(view->keys, options_, /*allow_empty=*/false, &rejection);
  if (!keys.ok()) return rejections_.Reject(rejection, keys.status());
  // The response is sized before anything is pulled.
  const uint64_t value_bytes =
      call->header.value_type() == proto::FLOAT16 ? 2 : sizeof(float);
  const uint64_t dim = call->entry.table->spec().dim;
  const uint64_t response_bytes = keys->size() * dim * value_bytes;
  if (response_bytes > options_.max_response_bytes) {
    return rejections_.Reject(
        Rejection::kOverLimit,
        absl::ResourceExhaustedError(absl::StrCat(
            "a Pull of ", keys->size(), " keys at dim ", dim, " answers ",
            response_bytes, " bytes; this server sends at most ",
            options_.max_response_bytes,
            " in one response (--max_message_bytes): split the "
            "batch")));
  }
  // A Pull may create a row for every key, besides the response.
  if (absl::Status room = memory_->Admit(
          response_bytes +
              (call->header.read_only()
                   ? 0
                   : MemoryGuard::RowCreationBytes(keys->size(), dim)),
          [&] { return absl::StrCat("a Pull of ", keys->size(), " keys"); });
      !room.ok()) {
    return rejections_.Reject(Rejection::kOverLimit, room);
  }
  call->keys = *std::move(keys);
  call->response_bytes = response_bytes;
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::ServePull(const PullCall& call,
                                            grpc::ByteBuffer* response) {
  const proto::PullRequest& request = call.header;
  embedding::Table* const table = call.entry.table;
  const std::vector<uint64_t>& keys = call.keys;
  StepSynchronizer* const synchronizer = call.entry.synchronizer;
  // The values are pulled straight into the buffer that goes out (or a
  // float32 scratch that Finish narrows into it).
  wire::PullResponseBuilder builder(request.value_type(),
                                    keys.size() * table->spec().dim);
  // A SYNC Pull for the step after the one being applied (a worker's
  // prefetch) reads the table while it waits (creating the rows it needs
  // then, off the step's critical path), then re-reads only the keys the
  // steps applied meanwhile changed. Not for a later step (it may never
  // become pullable: its read would have counted accesses and created rows
  // for nothing), nor where other writers change rows: admission (a Pull's
  // count decides a row's creation) and eviction.
  const embedding::TableSpec& spec = table->spec();
  const bool may_read_ahead =
      synchronizer != nullptr && !request.read_only() &&
      synchronizer->mode() == StepSynchronizer::Mode::kSync &&
      spec.admission.kind == embedding::AdmissionSpec::Kind::kAlways &&
      spec.eviction.ttl == 0;
  const uint64_t read_at =
      may_read_ahead ? synchronizer->AppliedThrough() : uint64_t{0};
  const bool read_ahead = may_read_ahead && request.step() == read_at + 1;
  const int32_t threads = options_.pull_threads;
  if (read_ahead) {
    const absl::Status read =
        PullValues(*table, keys, builder.values(), request.step(), threads);
    if (!read.ok()) return wire::ToGrpcStatus(read);
  }
  if (synchronizer != nullptr) {
    const absl::Status ready = synchronizer->AwaitPullable(request.step());
    if (!ready.ok()) return wire::ToGrpcStatus(ready);
  }
  absl::Status status;
  if (read_ahead) {
    status = RereadChanged(*synchronizer, *table, read_at, request.step(), keys,
                           builder.values(), threads);
  } else if (request.read_only()) {
    // Serving and evaluation.
    status = ReadValues(*table, keys, builder.values(), threads);
  } else {
    status =
        PullValues(*table, keys, builder.values(), request.step(), threads);
  }
  if (!status.ok()) return wire::ToGrpcStatus(status);
  *response = std::move(builder).Finish();
  return grpc::Status::OK;
}

absl::Status TrainingServiceImpl::RereadChanged(StepSynchronizer& synchronizer,
                                                embedding::Table& table,
                                                uint64_t read_at, uint64_t step,
                                                absl::Span<const uint64_t> keys,
                                                absl::Span<float> values,
                                                int32_t threads) {
  std::vector<std::shared_ptr<const StepSynchronizer::StepKeys>> changed;
  // A Lookup: the first read already counted the access.
  if (!synchronizer.ChangedKeys(read_at, step, &changed)) {
    return ReadValues(table, keys, values, threads);
  }
  std::vector<uint32_t> positions;
  std::vector<uint64_t> stale_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (std::any_of(changed.begin(), changed.end(), [&](const auto& applied) {
          return applied->contains(keys[i]);
        })) {
      positions.push_back(static_cast<uint32_t>(i));
      stale_keys.push_back(keys[i]);
    }
  }
  if (positions.empty()) return absl::OkStatus();
  const size_t dim = table.spec().dim;
  std::vector<float> fresh(stale_keys.size() * dim);
  RETURN_IF_ERROR(
      ReadValues(table, stale_keys, absl::MakeSpan(fresh), threads));
  for (size_t j = 0; j < positions.size(); ++j) {
    std::memcpy(values.data() + static_cast<size_t>(positions[j]) * dim,
                fresh.data() + j * dim, sizeof(float) * dim);
  }
  return absl::OkStatus();
}

grpc::Status TrainingServiceImpl::PushImpl(const grpc::ByteBuffer& bytes,
                                           bool forwarded, uint64_t* epoch) {
  if (!forwarded) {
    // Before the exactly-once log: a backup must not remember a push it
    // refused (it may be the primary for the retry).
    if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
      return wire::ToGrpcStatus(serves);
    }
  }
  absl::StatusOr<wire::PushRequestView> view = wire::ParsePushRequest(bytes);
  if (!view.ok())
    return rejections_.Reject(Rejection::kMalformedRequest, view.status());
  const proto::PushRequest& request = view->header;
  absl::StatusOr<TableRegistry::Entry> entry =
      registry_->Find(request.table_id());
  if (!entry.ok())
    return rejections_.Reject(Rejection::kUnknownTable, entry.status());
  embedding::Table* const table = entry->table;
  if (absl::Status type = wire::CheckValueType(request.value_type());
      !type.ok()) {
    return rejections_.Reject(Rejection::kBadValueType, type);
  }
  // In SYNC and SSP a part that only closes a step may carry no keys.
  const bool closes_step =
      entry->synchronizer != nullptr && request.parts_in_step() > 0;
  Rejection rejection;
  absl::StatusOr<std::vector<uint64_t>> keys =
      CheckedKeys(view->keys, options_, closes_step, &rejection);
  if (!keys.ok()) return rejections_.Reject(rejection, keys.status());
  const size_t dim = table->spec().dim;
  absl::StatusOr<wire::Gradients> gradients = wire::DecodeGradients(
      view->gradients, request.value_type(), keys->size() * dim);
  if (!gradients.ok()) {
    return rejections_.Reject(
        Rejection::kSizeMismatch,
        absl::InvalidArgumentError(
            absl::StrCat(keys->size(), " keys of table '", table->spec().name,
                         "' (dim ", dim, "): ", gradients.status().message())));
  }
  // A Push may create a row for every key.
  if (absl::Status room = memory_->Admit(
          MemoryGuard::RowCreationBytes(keys->size(), dim),
          [&] { return absl::StrCat("a Push of ", keys->size(), " keys"); });
      !room.ok()) {
    return rejections_.Reject(Rejection::kOverLimit, room);
  }
  // Exactly once: a retry of an applied Push gets the first outcome.
  const PushDeduplicator::Decision decision =
      deduplicator_->Begin(request.client_id(), request.sequence());
  if (decision.kind == PushDeduplicator::Decision::kDone) {
    return wire::ToGrpcStatus(decision.status);
  }
  const absl::Span<const float> grads = gradients->floats();
  bool applied = false;
  auto apply = [&] {
    const absl::Status pushed =
        entry->synchronizer != nullptr
            ? entry->synchronizer->Push(request.client_id(), request.step(),
                                        request.parts_in_step(), *keys, grads)
            : table->Push(*keys, grads,
                          embedding::AccessContext{request.step()});
    applied = pushed.ok();
    // A replica catching up reads it (its outcome may still be in the
    // making while backups apply it).
    if (applied) {
      deduplicator_->MarkApplied(request.client_id(), request.sequence());
    }
    return pushed;
  };
  const auto as_forwarded = [&] {
    proto::ReplicatedOp op;
    std::string* out = op.mutable_push();
    std::vector<grpc::Slice> slices;
    if (bytes.Dump(&slices).ok()) {
      for (const grpc::Slice& slice : slices) {
        out->append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
    }
    return op;
  };
  const absl::Status status =
      forwarded ? apply() : writes_->Write(as_forwarded, apply, epoch);
  if (!applied) {
    // Nothing changed (refused by the table, or this replica is not the
    // primary): a retry, here or at the next primary, is checked anew.
    deduplicator_->Abandon(request.client_id(), request.sequence());
  } else {
    deduplicator_->Finish(request.client_id(), request.sequence(), status);
  }
  if (!status.ok()) {
    // Sizes were checked above: what remains is NaN/Inf gradients or an
    // update that would overflow a row (INVALID_ARGUMENT), a SYNC step pushed
    // after it was applied (FAILED_PRECONDITION), or no memory.
    const Rejection reason =
        status.code() == absl::StatusCode::kInvalidArgument
            ? Rejection::kNonFinite
        : status.code() == absl::StatusCode::kFailedPrecondition
            ? Rejection::kLateStep
            : Rejection::kOverLimit;
    return rejections_.Reject(reason, status);
  }
  if (options_.TEST_drop_push_response_probability > 0 && !forwarded) {
    thread_local std::mt19937_64 rng(std::random_device{}());
    if (std::uniform_real_distribution<double>(0, 1)(rng) <
        options_.TEST_drop_push_response_probability) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                          "TEST: push applied, response dropped on purpose");
    }
  }
  return grpc::Status::OK;
}

absl::Status TrainingServiceImpl::ApplyForwarded(
    const proto::ReplicatedOp& op) {
  switch (op.op_case()) {
    case proto::ReplicatedOp::kPush: {
      grpc::Slice slice(op.push());
      const grpc::ByteBuffer bytes(&slice, 1);
      return wire::FromGrpcStatus(PushImpl(bytes, /*forwarded=*/true));
    }
    case proto::ReplicatedOp::kCreateTable: {
      proto::CreateTableResponse response;
      return wire::FromGrpcStatus(
          CreateTableImpl(op.create_table(), &response));
    }
    case proto::ReplicatedOp::kErase: {
      proto::EraseResponse response;
      return wire::FromGrpcStatus(EraseImpl(op.erase(), &response));
    }
    case proto::ReplicatedOp::kWriteRows: {
      proto::WriteRowsResponse response;
      return wire::FromGrpcStatus(WriteRowsImpl(op.write_rows(), &response));
    }
    case proto::ReplicatedOp::kDropTable:
      return registry_->Drop(op.drop_table().name()).status();
    default:
      return absl::InvalidArgumentError("an empty replicated write");
  }
}

grpc::Status TrainingServiceImpl::EraseImpl(const proto::EraseRequest& request,
                                            proto::EraseResponse* response) {
  TableRegistry::Entry entry;
  std::vector<uint64_t> keys;
  if (grpc::Status found =
          TableAndKeys(request.table_id(), request.keys(), &entry, &keys);
      !found.ok()) {
    return found;
  }
  absl::StatusOr<uint64_t> erased = entry.table->Erase(keys);
  if (!erased.ok()) return wire::ToGrpcStatus(erased.status());
  response->set_erased(*erased);
  return grpc::Status::OK;
}

grpc::Status TrainingServiceImpl::WriteInOrder(
    RpcMethod method, absl::FunctionRef<proto::ReplicatedOp()> op,
    absl::FunctionRef<grpc::Status()> apply) {
  return metrics_->Measure(method, [&] {
    grpc::Status applied;
    const absl::Status written = writes_->Write(op, [&] {
      applied = apply();
      return wire::FromGrpcStatus(applied);
    });
    return applied.ok() ? wire::ToGrpcStatus(written) : applied;
  });
}

grpc::Status TrainingServiceImpl::Erase(grpc::ServerContext*,
                                        const proto::EraseRequest* request,
                                        proto::EraseResponse* response) {
  return WriteInOrder(
      RpcMethod::kErase,
      [&] {
        proto::ReplicatedOp op;
        *op.mutable_erase() = *request;
        return op;
      },
      [&] { return EraseImpl(*request, response); });
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

namespace {

// A Pull's reactor: holds the answer's bytes against its peer's budget
// until gRPC is done with the call (the answer sent, or the call gone).
class PullReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit PullReactor(PeerBudget::Hold hold) : hold_(std::move(hold)) {}
  void OnDone() override { delete this; }

 private:
  PeerBudget::Hold hold_;
};

}  // namespace

grpc::ServerUnaryReactor* TrainingServiceImpl::Pull(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  Identify(context);
  auto timer = std::make_unique<RpcMetrics::Timer>(metrics_, RpcMethod::kPull);
  auto call = std::make_unique<PullCall>();
  grpc::Status status = ParsePull(*request, call.get());
  grpc::ServerUnaryReactor* reactor = nullptr;
  if (status.ok()) {
    absl::StatusOr<PeerBudget::Hold> hold =
        unread_.Acquire(context->peer(), call->response_bytes);
    if (hold.ok()) {
      reactor = new PullReactor(*std::move(hold));
    } else {
      status = rejections_.Reject(Rejection::kUnreadAnswers, hold.status());
    }
  }
  if (reactor == nullptr) reactor = context->DefaultReactor();
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

grpc::ServerUnaryReactor* TrainingServiceImpl::Push(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* const reactor = context->DefaultReactor();
  Identify(context);
  uint64_t epoch = 0;
  const grpc::Status status = metrics_->Measure(RpcMethod::kPush, [&] {
    return PushImpl(*request, /*forwarded=*/false, &epoch);
  });
  if (status.ok() && epoch != 0) {
    context->AddTrailingMetadata(wire::kReplicaEpochMetadata,
                                 absl::StrCat(epoch));
  }
  FinishBulkCall(reactor, status, response);
  return reactor;
}

}  // namespace embedps::server
