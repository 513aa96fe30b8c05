#include "server/training_service.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/status_macros.h"
#include "embedding/table.h"
#include "embedding/table_digest.h"
#include "embedding/table_spec.h"
#include "server/table_config.h"
#include "wire/grpc_status.h"
#include "wire/server_identity.h"

namespace embedps::server {

TrainingServiceImpl::TrainingServiceImpl(
    TrainingServiceOptions options, TableRegistry* registry, WriteOrder* writes,
    PushDeduplicator* deduplicator, ShardCheckpointer* checkpointer,
    Publisher* publisher, RpcMetrics* metrics, MemoryGuard* memory)
    : options_(std::move(options)),
      registry_(registry),
      writes_(writes),
      deduplicator_(deduplicator),
      checkpointer_(checkpointer),
      publisher_(publisher),
      metrics_(metrics),
      memory_(memory),
      restored_step_(options_.restored_step < 0
                         ? std::string()
                         : absl::StrCat(options_.restored_step)),
      unread_(options_.max_unread_bytes_per_peer) {}

void TrainingServiceImpl::Identify(grpc::CallbackServerContext* context) {
  // Trailing metadata: every answer ends with it, errors too.
  if (const std::string incarnation = writes_->Incarnation();
      !incarnation.empty()) {
    context->AddTrailingMetadata(wire::kIncarnationMetadata, incarnation);
  }
  if (!restored_step_.empty()) {
    context->AddTrailingMetadata(wire::kRestoredStepMetadata, restored_step_);
  }
}

grpc::Status TrainingServiceImpl::CreateTableImpl(
    const proto::CreateTableRequest& request,
    proto::CreateTableResponse* response) {
  const proto::TableConfig& config = request.config();
  if (config.admission().sketch_counters() > options_.max_sketch_counters) {
    return rejections_.Reject(
        Rejection::kOverLimit,
        absl::ResourceExhaustedError(absl::StrCat(
            "table '", config.name(), "': admission.sketch_counters ",
            config.admission().sketch_counters(),
            " (a byte each) is more than this server gives one "
            "table: ",
            options_.max_sketch_counters, " (--max_sketch_counters)")));
  }
  // What the table commits at once for its expected_rows (a spec that
  // does not validate, or asks past --max_expected_rows_mb, is refused by
  // the registry below).
  uint64_t expected_rows_bytes = 0;
  if (config.expected_rows() > 0) {
    absl::StatusOr<embedding::TableSpec> spec = SpecFromConfig(config);
    if (spec.ok() && embedding::ValidateTableSpec(*spec).ok()) {
      expected_rows_bytes = registry_->ExpectedRowsBytesHere(*spec);
    }
  }
  if (!registry_->FindByName(config.name()).ok()) {
    if (absl::Status room = memory_->Admit(
            config.admission().sketch_counters() + expected_rows_bytes,
            [&] { return absl::StrCat("CreateTable '", config.name(), "'"); });
        !room.ok()) {
      return rejections_.Reject(Rejection::kOverLimit, room);
    }
  }
  absl::StatusOr<TableRegistry::CreateResult> result =
      registry_->Create(config, options_.max_tables);
  if (!result.ok()) {
    return rejections_.Reject(
        result.status().code() == absl::StatusCode::kFailedPrecondition
            ? Rejection::kSpecConflict
        : result.status().code() == absl::StatusCode::kResourceExhausted
            ? Rejection::kOverLimit
            : Rejection::kInvalidSpec,
        result.status());
  }
  response->set_table_id(result->table_id);
  response->set_created(result->created);
  return grpc::Status::OK;
}

absl::Status TrainingServiceImpl::FillStats(const proto::StatsRequest& request,
                                            proto::StatsResponse* response) {
  response->set_shard_index(options_.shard_index);
  response->set_num_shards(options_.num_shards);
  std::vector<TableRegistry::Entry> entries;
  if (request.table_id().empty()) {
    entries = registry_->List();
  } else {
    for (uint32_t id : request.table_id()) {
      absl::StatusOr<TableRegistry::Entry> entry = registry_->Find(id);
      if (!entry.ok()) {
        rejections_.Reject(Rejection::kUnknownTable, entry.status());
        return entry.status();
      }
      entries.push_back(*entry);
    }
  }
  for (const TableRegistry::Entry& entry : entries) {
    proto::TableStatsProto* out = response->add_table();
    out->set_table_id(entry.table_id);
    out->set_name(entry.table->spec().name);
    TableStatsToProto(entry.table->Stats(), out);
    if (request.content_digest()) {
      ASSIGN_OR_RETURN(const embedding::TableDigest digest,
                       embedding::DigestTable(*entry.table));
      out->set_content_digest(digest.digest);
    }
  }
  response->set_duplicate_pushes(deduplicator_->duplicates());
  rejections_.Fill(response);
  return absl::OkStatus();
}

grpc::Status TrainingServiceImpl::CreateTable(
    grpc::ServerContext*, const proto::CreateTableRequest* request,
    proto::CreateTableResponse* response) {
  return metrics_->Measure(RpcMethod::kCreateTable, [&] {
    grpc::Status created;
    const absl::Status written = writes_->Write(
        [&] {
          proto::ReplicatedOp op;
          *op.mutable_create_table() = *request;
          return op;
        },
        [&] {
          created = CreateTableImpl(*request, response);
          return wire::FromGrpcStatus(created);
        });
    // A refusal of the table itself is `created`'s, counted there.
    return created.ok() ? wire::ToGrpcStatus(written) : created;
  });
}

grpc::Status TrainingServiceImpl::DropTable(
    grpc::ServerContext*, const proto::DropTableRequest* request,
    proto::DropTableResponse* response) {
  return metrics_->Measure(RpcMethod::kDropTable, [&] {
    grpc::Status dropped;
    const absl::Status written = writes_->Write(
        [&] {
          proto::ReplicatedOp op;
          *op.mutable_drop_table() = *request;
          return op;
        },
        [&] {
          absl::StatusOr<uint32_t> id = registry_->Drop(request->name());
          if (!id.ok()) {
            dropped = rejections_.Reject(Rejection::kUnknownTable, id.status());
          } else {
            response->set_table_id(*id);
            dropped = grpc::Status::OK;
          }
          return wire::FromGrpcStatus(dropped);
        });
    return dropped.ok() ? wire::ToGrpcStatus(written) : dropped;
  });
}

grpc::Status TrainingServiceImpl::ListTables(
    grpc::ServerContext*, const proto::ListTablesRequest*,
    proto::ListTablesResponse* response) {
  return metrics_->Measure(RpcMethod::kListTables, [&] {
    for (const TableRegistry::Entry& entry : registry_->List()) {
      proto::ListTablesResponse::Entry* out = response->add_table();
      out->set_table_id(entry.table_id);
      *out->mutable_config() = *entry.config;
    }
    return grpc::Status::OK;
  });
}

void TrainingServiceImpl::RunDetached(absl::AnyInvocable<void() &&> work) {
  {
    MutexLock lock(&detached_mu_);
    ++detached_running_;
  }
  std::thread([this, work = std::move(work)]() mutable {
    std::move(work)();
    work = nullptr;  // what it held goes before the service may
    MutexLock lock(&detached_mu_);
    if (--detached_running_ == 0) detached_done_.SignalAll();
  }).detach();
}

TrainingServiceImpl::~TrainingServiceImpl() {
  MutexLock lock(&detached_mu_);
  detached_done_.Wait(&detached_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return detached_running_ == 0;
  });
}

grpc::Status TrainingServiceImpl::Save(grpc::ServerContext*,
                                       const proto::SaveRequest* request,
                                       proto::SaveResponse* response) {
  return metrics_->Measure(RpcMethod::kSave, [&] {
    if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
      return wire::ToGrpcStatus(serves);
    }
    if (absl::Status s = checkpointer_->AcceptsRequests(); !s.ok()) {
      return wire::ToGrpcStatus(s);
    }
    absl::StatusOr<double> pause = checkpointer_->Save(*request);
    if (!pause.ok()) return wire::ToGrpcStatus(pause.status());
    response->set_pause_seconds(*pause);
    return grpc::Status::OK;
  });
}

grpc::Status TrainingServiceImpl::AwaitSave(
    grpc::ServerContext*, const proto::AwaitSaveRequest* request,
    proto::AwaitSaveResponse* response) {
  return metrics_->Measure(RpcMethod::kAwaitSave, [&] {
    absl::StatusOr<proto::AwaitSaveResponse> saved =
        checkpointer_->AwaitSave(request->name());
    if (!saved.ok()) return wire::ToGrpcStatus(saved.status());
    *response = *std::move(saved);
    return grpc::Status::OK;
  });
}

grpc::Status TrainingServiceImpl::Load(grpc::ServerContext*,
                                       const proto::LoadRequest* request,
                                       proto::LoadResponse* response) {
  return metrics_->Measure(RpcMethod::kLoad, [&] {
    if (absl::Status load = writes_->CheckLoad(); !load.ok()) {
      return wire::ToGrpcStatus(load);
    }
    if (absl::Status s = checkpointer_->AcceptsRequests(); !s.ok()) {
      return wire::ToGrpcStatus(s);
    }
    absl::StatusOr<proto::LoadResponse> loaded;
    switch (request->phase()) {
      case proto::LoadRequest::LOAD:
        loaded = checkpointer_->Restore(request->path());
        break;
      case proto::LoadRequest::PREPARE:
        loaded = checkpointer_->PrepareRestore(request->path(),
                                               request->transaction());
        break;
      case proto::LoadRequest::COMMIT:
        if (absl::Status committed =
                checkpointer_->CommitRestore(request->transaction());
            committed.ok()) {
          loaded = proto::LoadResponse();
        } else {
          loaded = committed;
        }
        break;
      case proto::LoadRequest::ABORT:
        checkpointer_->AbortRestore(request->transaction());
        loaded = proto::LoadResponse();
        break;
      default:
        return grpc::Status(
            grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("LoadRequest.phase ", request->phase(),
                         " is none of LOAD, PREPARE, COMMIT, ABORT"));
    }
    if (!loaded.ok()) return wire::ToGrpcStatus(loaded.status());
    *response = *std::move(loaded);
    return grpc::Status::OK;
  });
}

grpc::Status TrainingServiceImpl::Publish(grpc::ServerContext*,
                                          const proto::PublishRequest* request,
                                          proto::PublishResponse* response) {
  return metrics_->Measure(RpcMethod::kPublish, [&] {
    // A replicated shard publishes from its primary only (a backup's
    // publisher has seen none of the shard's changes).
    if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
      return wire::ToGrpcStatus(serves);
    }
    absl::StatusOr<proto::PublishResponse> published =
        publisher_->Publish(*request);
    if (!published.ok()) return wire::ToGrpcStatus(published.status());
    *response = *std::move(published);
    return grpc::Status::OK;
  });
}

grpc::Status TrainingServiceImpl::Subscribe(
    grpc::ServerContext* context, const proto::SubscribeRequest* request,
    grpc::ServerWriter<proto::Publication>* writer) {
  return metrics_->Measure(RpcMethod::kSubscribe, [&] {
    uint64_t publisher_id = request->publisher_id();
    uint64_t after = request->after_sequence();
    while (!context->IsCancelled()) {
      // The primary's stream only; one that stops being the primary ends
      // it (UNAVAILABLE), and the subscriber tries the shard's next
      // replica.
      if (absl::Status serves = writes_->CheckServes(); !serves.ok()) {
        return wire::ToGrpcStatus(serves);
      }
      // Short waits, so that a shutdown or a gone subscriber is noticed.
      absl::StatusOr<std::vector<std::shared_ptr<const proto::Publication>>>
          parts = publisher_->After(publisher_id, after,
                                    absl::Now() + absl::Milliseconds(500),
                                    request->after_step());
      if (!parts.ok()) return wire::ToGrpcStatus(parts.status());
      for (const std::shared_ptr<const proto::Publication>& part : *parts) {
        if (!writer->Write(*part)) return grpc::Status::OK;  // subscriber gone
        publisher_id = part->publisher_id();
        after = part->sequence();
      }
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "subscription ended");
  });
}

}  // namespace embedps::server
