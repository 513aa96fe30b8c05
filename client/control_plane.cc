// Client's control plane: checkpoints, Load, Publish, Erase, Stats
// (contracts in client/client.h).
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "checkpoint/retention.h"
#include "client/client.h"
#include "client/client_impl.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "proto/stats.grpc.pb.h"
#include "proto/training.grpc.pb.h"

namespace embedps::client {

using client_internal::RunParts;

absl::StatusOr<std::unique_ptr<Client::PendingCheckpoint>>
Client::StartCheckpoint(const CheckpointOptions& options) {
  if (options.root.empty()) {
    return absl::InvalidArgumentError("a checkpoint needs a root directory");
  }
  RETURN_IF_ERROR(impl_->CheckServers());
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

absl::Status Client::CheckCheckpointRoot(const std::string& root) {
  if (root.empty()) {
    return absl::InvalidArgumentError("a checkpoint needs a root directory");
  }
  RETURN_IF_ERROR(impl_->CheckServers());
  std::error_code error;
  std::filesystem::create_directories(root, error);
  if (error) {
    return ErrnoStatus(error.value(),
                       absl::StrCat("cannot create checkpoint root '", root,
                                    "': ", error.message()));
  }
  return RunParts(num_shards(), [&](size_t shard) {
    proto::SaveRequest request;
    request.set_directory(root);
    request.set_check_only(true);
    proto::SaveResponse ignored;
    return impl_->Call(static_cast<int32_t>(shard), "Save",
                       [&](Impl::Stubs& stub, grpc::ClientContext* c) {
                         return stub.training->Save(c, request, &ignored);
                       });
  });
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
  RETURN_IF_ERROR(impl_->CheckServers());
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
  RETURN_IF_ERROR(impl_->CheckServers());
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
  RETURN_IF_ERROR(impl_->CheckServers());
  std::vector<uint64_t> unique(keys.begin(), keys.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  const std::vector<client_internal::Part> parts =
      client_internal::SplitByShard(unique, num_shards(),
                                    impl_->options.max_keys_per_request);
  std::vector<uint64_t> erased(parts.size(), 0);
  RETURN_IF_ERROR(RunParts(parts.size(), [&](size_t p) {
    const client_internal::Part& part = parts[p];
    std::vector<uint64_t> mine;
    mine.reserve(part.rows.size());
    for (uint32_t row : part.rows) mine.push_back(unique[row]);
    proto::EraseRequest request;
    request.set_table_id(table.shard_table_ids[part.shard]);
    request.set_keys(reinterpret_cast<const char*>(mine.data()),
                     mine.size() * sizeof(uint64_t));
    proto::EraseResponse response;
    RETURN_IF_ERROR(impl_->Call(
        part.shard, "Erase", [&](Impl::Stubs& stub, grpc::ClientContext* c) {
          return stub.training->Erase(c, request, &response);
        }));
    erased[p] = response.erased();
    return absl::OkStatus();
  }));
  std::vector<uint64_t> by_shard(num_shards(), 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    by_shard[parts[p].shard] += erased[p];
  }
  return by_shard;
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
