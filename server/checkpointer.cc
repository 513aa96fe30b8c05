#include "server/checkpointer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "checkpoint/manifest.h"
#include "checkpoint/retention.h"
#include "checkpoint/table_file.h"
#include "common/file_io.h"
#include "common/key_hash.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "common/status_macros.h"
#include "embedding/table.h"
#include "embedding/table_spec.h"
#include "server/path_confinement.h"
#include "server/serving_storage.h"
#include "server/table_config.h"

namespace embedps::server {

namespace {

// The file of `table` written by old shard `shard` in `manifest`, or null.
const proto::CheckpointShardFile* ShardFile(
    const proto::CheckpointManifest& manifest, const std::string& table,
    int32_t shard) {
  const proto::CheckpointShardFile* found = nullptr;
  for (const proto::CheckpointTable& t : manifest.table()) {
    if (t.config().name() != table) continue;
    for (const proto::CheckpointShardFile& f : t.file()) {
      if (f.shard() == shard) found = &f;
    }
  }
  return found;
}

}  // namespace

struct ShardCheckpointer::TableSnapshotToWrite {
  std::string table;
  std::unique_ptr<embedding::TableSnapshot> snapshot;
};

ShardCheckpointer::ShardCheckpointer(int32_t shard_index, int32_t num_shards,
                                     TableRegistry* registry,
                                     std::string checkpoint_root,
                                     MemoryGuard* memory, int keep_checkpoints)
    : shard_index_(shard_index),
      num_shards_(num_shards),
      registry_(registry),
      checkpoint_root_(std::move(checkpoint_root)),
      memory_(memory),
      keep_checkpoints_(keep_checkpoints) {}

ShardCheckpointer::~ShardCheckpointer() {
  MutexLock lock(&mu_);
  WaitForWriterLocked();
}

void ShardCheckpointer::WaitForWriterLocked() {
  written_.Wait(&mu_,
                [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !writing_; });
  if (writer_.joinable()) writer_.join();
}

absl::StatusOr<std::string> ShardCheckpointer::Confined(
    const std::string& path, absl::string_view what) const {
  if (checkpoint_root_.empty()) return path;
  return ResolveInside(checkpoint_root_, path, what);
}

absl::StatusOr<std::string> ShardCheckpointer::CheckSaveDirectory(
    const std::string& requested) const {
  if (requested.empty()) {
    return absl::InvalidArgumentError("Save needs a checkpoint directory");
  }
  ASSIGN_OR_RETURN(const std::string directory,
                   Confined(requested, "Save: checkpoint directory"));
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Save: checkpoint directory '", requested, "' does not exist on shard ",
        shard_index_,
        " (every shard must reach it: the same machine or a shared file "
        "system)"));
  }
  if (access(directory.c_str(), W_OK | X_OK) != 0) {
    return ErrnoStatus(errno,
                       absl::StrCat("Save: checkpoint directory '", requested,
                                    "' is not writable on "
                                    "shard ",
                                    shard_index_, ": ", std::strerror(errno)));
  }
  return directory;
}

absl::Status ShardCheckpointer::AcceptsRequests() const {
  if (!checkpoint_root_.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this server has no --checkpoint_root, so it takes no Save or Load "
      "requests (they would name paths on its disk): start ps_server with "
      "--checkpoint_root=DIR, the directory checkpoints go to");
}

absl::StatusOr<double> ShardCheckpointer::Save(
    const proto::SaveRequest& request) {
  if (request.check_only()) {
    RETURN_IF_ERROR(CheckSaveDirectory(request.directory()).status());
    return 0.0;
  }
  if (request.name().empty() || absl::StrContains(request.name(), '/')) {
    return absl::InvalidArgumentError(
        absl::StrCat("Save needs a checkpoint name without '/', got '",
                     request.name(), "'"));
  }
  ASSIGN_OR_RETURN(const std::string directory,
                   CheckSaveDirectory(request.directory()));
  std::error_code error;
  MutexLock save_lock(&save_mu_);
  {
    MutexLock lock(&mu_);
    WaitForWriterLocked();
  }
  const bool incremental = request.incremental() && !request.parent().empty() &&
                           request.parent() == last_snapshot_;
  const std::string shard_dir =
      (std::filesystem::path(directory) /
       checkpoint::ShardDirectoryName(shard_index_, num_shards_))
          .string();
  // A checkpoint is never overwritten: not a complete one, nor this
  // shard's files of one being written.
  if (std::filesystem::exists(
          std::filesystem::path(directory) / checkpoint::kManifestFileName,
          error) ||
      (std::filesystem::is_directory(shard_dir, error) &&
       !std::filesystem::is_empty(shard_dir, error))) {
    return absl::AlreadyExistsError(absl::StrCat(
        "Save: '", request.directory(),
        "' already holds a checkpoint (or this shard's files of one); "
        "checkpoints are never overwritten: save into a new directory"));
  }
  std::filesystem::create_directories(shard_dir, error);
  if (error) {
    return ErrnoStatus(error.value(),
                       absl::StrCat("Save: cannot create '", shard_dir,
                                    "': ", error.message()));
  }

  // The pause: each table's snapshot (tables one after another).
  std::vector<TableSnapshotToWrite> snapshots;
  absl::Duration pause;
  for (const TableRegistry::Entry& entry : registry_->List()) {
    ASSIGN_OR_RETURN(auto snapshot, entry.table->TakeSnapshot(incremental));
    pause += snapshot->pause();
    snapshots.push_back({entry.config->name(), std::move(snapshot)});
  }

  MutexLock lock(&mu_);
  last_snapshot_ = request.name();
  save_name_ = request.name();
  writing_ = true;
  save_status_ = absl::OkStatus();
  save_response_.Clear();
  writer_ = std::thread([this, shard_dir,
                         snapshots = std::move(snapshots)]() mutable {
    const absl::Time begin = absl::Now();
    proto::AwaitSaveResponse response;
    absl::Status status;
    for (const TableSnapshotToWrite& item : snapshots) {
      const std::string relative =
          (std::filesystem::path(shard_dir).filename() /
           checkpoint::TableFileName(item.table))
              .string();
      absl::StatusOr<checkpoint::TableFileSummary> summary =
          checkpoint::WriteTableFile(
              *item.snapshot,
              (std::filesystem::path(shard_dir).parent_path() / relative)
                  .string());
      if (!summary.ok()) {
        status = summary.status();
        break;
      }
      auto* file = response.add_file();
      file->set_table(item.table);
      proto::CheckpointShardFile* shard_file = file->mutable_file();
      shard_file->set_shard(shard_index_);
      shard_file->set_path(relative);
      shard_file->set_bytes(summary->bytes);
      shard_file->set_xxh3(summary->xxh3);
      shard_file->set_rows(summary->rows);
      shard_file->set_removed(summary->removed);
      shard_file->set_incremental(item.snapshot->incremental());
    }
    // The copies of resident rows and the writers' buffers: back to the
    // kernel, not kept to the next checkpoint (malloc_options.h).
    snapshots.clear();
    ReturnFreedMemory();
    if (status.ok()) status = SyncPath(shard_dir);
    response.set_write_seconds(absl::ToDoubleSeconds(absl::Now() - begin));
    if (status.ok() && keep_checkpoints_ > 0 && shard_index_ == 0) {
      // The root the checkpoint goes into: the parent of its directory.
      const std::string root =
          std::filesystem::path(shard_dir).parent_path().parent_path().string();
      absl::StatusOr<checkpoint::PruneResult> pruned =
          checkpoint::PruneCheckpoints(root, keep_checkpoints_);
      if (!pruned.ok()) {
        Logger("checkpoint")
            ->warn("pruning '{}' (--keep_checkpoints={}) failed: {}", root,
                   keep_checkpoints_, pruned.status().ToString());
      } else if (!pruned->deleted.empty()) {
        Logger("checkpoint")
            ->info("pruned '{}': deleted {}, kept {}", root,
                   absl::StrJoin(pruned->deleted, ", "),
                   absl::StrJoin(pruned->kept, ", "));
      }
    }
    MutexLock lock(&mu_);
    save_status_ = status;
    save_response_ = std::move(response);
    writing_ = false;
    written_.SignalAll();
  });
  return absl::ToDoubleSeconds(pause);
}

absl::StatusOr<proto::AwaitSaveResponse> ShardCheckpointer::AwaitSave(
    const std::string& name) {
  MutexLock lock(&mu_);
  if (name.empty() || name != save_name_) {
    return absl::NotFoundError(absl::StrCat(
        "no save named '", name, "' on shard ", shard_index_,
        save_name_.empty()
            ? std::string(" (none started)")
            : absl::StrCat(" (the latest is '", save_name_, "')")));
  }
  written_.Wait(&mu_,
                [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !writing_; });
  if (!save_status_.ok()) return save_status_;
  return save_response_;
}

absl::StatusOr<proto::LoadResponse> ShardCheckpointer::Restore(
    const std::string& path) {
  MutexLock save_lock(&save_mu_);
  ASSIGN_OR_RETURN(PreparedRestore prepared, RestoreAside(path));
  proto::LoadResponse response = prepared.response;
  RETURN_IF_ERROR(Install(std::move(prepared)));
  return response;
}

absl::StatusOr<proto::LoadResponse> ShardCheckpointer::PrepareRestore(
    const std::string& path, const std::string& transaction) {
  MutexLock save_lock(&save_mu_);
  prepared_.reset();  // an older prepared Load goes first (its memory)
  prepared_transaction_.clear();
  ASSIGN_OR_RETURN(PreparedRestore prepared, RestoreAside(path));
  proto::LoadResponse response = prepared.response;
  prepared_ = std::make_unique<PreparedRestore>(std::move(prepared));
  prepared_transaction_ = transaction;
  return response;
}

absl::Status ShardCheckpointer::CommitRestore(const std::string& transaction) {
  MutexLock save_lock(&save_mu_);
  if (prepared_ == nullptr || prepared_transaction_ != transaction) {
    return absl::NotFoundError(
        "no Load prepared under that transaction on this shard (another "
        "Load replaced it, or it was aborted)");
  }
  std::unique_ptr<PreparedRestore> prepared = std::move(prepared_);
  prepared_transaction_.clear();
  return Install(std::move(*prepared));
}

void ShardCheckpointer::AbortRestore(const std::string& transaction) {
  MutexLock save_lock(&save_mu_);
  if (prepared_ != nullptr && prepared_transaction_ == transaction) {
    prepared_.reset();
    prepared_transaction_.clear();
  }
}

absl::Status ShardCheckpointer::Install(PreparedRestore prepared) {
  if (absl::Status installed = registry_->Install(std::move(prepared.tables));
      !installed.ok()) {
    return absl::Status(
        installed.code(),
        absl::StrCat("restoring '", prepared.dir, "': ", installed.message(),
                     " (nothing was restored)"));
  }
  // Restored rows count as unchanged, but the tables' change sets restart
  // with their first snapshot: the next save writes full files.
  MutexLock lock(&mu_);
  last_snapshot_.clear();
  return absl::OkStatus();
}

absl::StatusOr<ShardCheckpointer::PreparedRestore>
ShardCheckpointer::RestoreAside(const std::string& path) {
  const auto log = Logger("checkpoint");
  ASSIGN_OR_RETURN(const std::string confined, Confined(path, "Load: path"));
  std::vector<std::string> skipped;
  ASSIGN_OR_RETURN(const std::string dir,
                   checkpoint::ResolveCheckpoint(confined, &skipped));
  for (const std::string& why : skipped) {
    log->warn("checkpoint left out (its manifest does not read): {}", why);
  }
  RETURN_IF_ERROR(Confined(dir, "Load: checkpoint").status());
  ASSIGN_OR_RETURN(const std::vector<checkpoint::ChainLink> chain,
                   checkpoint::ReadChain(dir));
  // The manifests name their parents and files: those stay inside too.
  for (const checkpoint::ChainLink& link : chain) {
    RETURN_IF_ERROR(Confined(link.dir, "Load: parent checkpoint").status());
    for (const proto::CheckpointTable& table : link.manifest.table()) {
      for (const proto::CheckpointShardFile& file : table.file()) {
        RETURN_IF_ERROR(
            Confined((std::filesystem::path(link.dir) / file.path()).string(),
                     "Load: checkpoint file")
                .status());
      }
    }
  }
  const proto::CheckpointManifest& latest = chain.front().manifest;
  const int32_t old_shards = latest.num_shards();
  if (old_shards < 1) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", dir, "' names ", old_shards, " shards"));
  }
  const bool same_sharding = old_shards == num_shards_;
  RETURN_IF_ERROR(AdmitRestore(chain, dir, same_sharding));
  const std::function<bool(uint64_t)> keep = [this](uint64_t key) {
    return ShardOfKey(key, num_shards_) == shard_index_;
  };

  // All or nothing: every table is built and restored aside, and the
  // registry takes them together only once all of them are whole; on any
  // error the shard is as it was.
  for (const proto::CheckpointTable& saved : latest.table()) {
    const std::string& name = saved.config().name();
    if (absl::StatusOr<TableRegistry::Entry> existing =
            registry_->FindByName(name);
        existing.ok() && existing->table->Stats().rows > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot restore table '", name, "' from '", dir,
                       "': it already has rows on shard ", shard_index_,
                       " (nothing was restored)"));
    }
  }
  proto::LoadResponse response;
  response.set_name(latest.name());
  response.set_step(latest.step());
  std::vector<std::unique_ptr<TableRegistry::PreparedTable>> prepared;
  for (const proto::CheckpointTable& saved : latest.table()) {
    const std::string& name = saved.config().name();
    absl::StatusOr<std::unique_ptr<TableRegistry::PreparedTable>> built =
        registry_->Prepare(values_only_
                               ? ValuesOnlyConfig(saved.config(), storage_)
                               : saved.config());
    if (!built.ok()) {
      return absl::Status(built.status().code(),
                          absl::StrCat("restoring table '", name, "' from '",
                                       dir, "': ", built.status().message()));
    }
    embedding::Table& table = (*built)->table();
    // A values-only restore encodes each row as the table stores it.
    checkpoint::ValuesOnly values_only;
    values_only.dim = saved.config().dim();
    if (values_only_ && table.spec().dim != values_only.dim) {
      const RowCodec codec((*built)->config().serving().storage(),
                           values_only.dim);
      values_only.encode = [codec](const float* embedding, float* row) {
        codec.Encode(embedding, row);
      };
    }

    for (int32_t old = 0; old < old_shards; ++old) {
      if (same_sharding && old != shard_index_) continue;
      // This old shard's files, newest first, down to a full one.
      struct LinkFile {
        std::string dir;
        proto::CheckpointShardFile file;
        checkpoint::FileChecksum checksum;
      };
      std::vector<LinkFile> files;
      bool reached_full = false;
      for (const checkpoint::ChainLink& link : chain) {
        const proto::CheckpointShardFile* found =
            ShardFile(link.manifest, name, old);
        if (found == nullptr) {
          return absl::DataLossError(absl::StrCat("checkpoint '", link.dir,
                                                  "' has no file for table '",
                                                  name, "' of shard ", old));
        }
        files.push_back({link.dir, *found,
                         checkpoint::ExpectedChecksum(link.manifest, *found)});
        if (!found->incremental()) {
          reached_full = true;
          break;
        }
      }
      if (!reached_full) {
        return absl::DataLossError(
            absl::StrCat("table '", name, "', shard ", old,
                         ": no full file in the chain of '", dir, "'"));
      }
      for (auto it = files.rbegin(); it != files.rend(); ++it) {
        const std::string file_path =
            (std::filesystem::path(it->dir) / it->file.path()).string();
        ASSIGN_OR_RETURN(
            const checkpoint::TableFileRestore restored,
            checkpoint::RestoreTableFile(
                file_path, it->checksum, table, same_sharding ? nullptr : keep,
                values_only_ ? &values_only : nullptr));
        if (it + 1 == files.rend()) {
          // The newest file holds the admission state as of the checkpoint.
          RETURN_IF_ERROR(
              table.MergeAdmissionStates(restored.admission_states));
        }
      }
    }
    const uint64_t rows = table.Stats().rows;
    response.set_rows(response.rows() + rows);
    log->info(
        "restored table '{}': {} rows on shard {} of {} from '{}' "
        "(written by {} shards, {} checkpoint(s) in the chain)",
        name, rows, shard_index_, num_shards_, dir, old_shards, chain.size());
    prepared.push_back(*std::move(built));
  }
  PreparedRestore result;
  result.dir = dir;
  result.response = std::move(response);
  result.tables = std::move(prepared);
  return result;
}

absl::Status ShardCheckpointer::AdmitRestore(
    const std::vector<checkpoint::ChainLink>& chain, const std::string& dir,
    bool same_sharding) {
  if (memory_ == nullptr || memory_->limit_bytes() == 0) {
    return absl::OkStatus();
  }
  const proto::CheckpointManifest& latest = chain.front().manifest;
  uint64_t bytes = 0, rows_here = 0;
  for (const proto::CheckpointTable& saved : latest.table()) {
    const std::string& name = saved.config().name();
    absl::StatusOr<embedding::TableSpec> spec = SpecFromConfig(saved.config());
    // A config that does not validate is refused when its table is created.
    if (!spec.ok() || !embedding::ValidateTableSpec(*spec).ok()) continue;
    uint64_t rows = 0;
    for (int32_t old = 0; old < latest.num_shards(); ++old) {
      if (same_sharding && old != shard_index_) continue;
      for (const checkpoint::ChainLink& link : chain) {
        const proto::CheckpointShardFile* file =
            ShardFile(link.manifest, name, old);
        if (file == nullptr) break;  // DATA_LOSS when the rows are read
        rows += file->rows();
        if (!file->incremental()) break;
      }
    }
    if (!same_sharding) rows = TableRegistry::ShardShare(rows, num_shards_);
    rows_here += rows;
    embedding::TableSpec local = *spec;
    local.expected_rows = rows;
    uint64_t table_bytes = embedding::ExpectedRowsBytes(local);
    // A table made here anew commits its expected_rows too (the rows then
    // fill that memory); an existing empty one holds its share already.
    if (!registry_->FindByName(name).ok()) {
      table_bytes =
          std::max(table_bytes, registry_->ExpectedRowsBytesHere(*spec));
    }
    bytes += table_bytes;
  }
  return memory_->Admit(bytes, [&] {
    return absl::StrCat("restoring '", dir, "' (", rows_here,
                        " rows on this shard)");
  });
}

void ShardCheckpointer::SnapshotOutsideCheckpoints(
    absl::FunctionRef<void()> take) {
  MutexLock save_lock(&save_mu_);
  take();
  last_snapshot_.clear();
}

}  // namespace embedps::server
