#include <filesystem>
#include <future>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/manifest.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "dense/dense_model.pb.h"
#include "worker/dlrm_worker.h"
#include "worker/input_layout.h"

namespace embedps::worker::dlrm_internal {
namespace {

// The dense parameters' file in a checkpoint.
constexpr const char* kDenseFile = checkpoint::kDenseParametersFile;

std::string DensePathIn(const std::string& checkpoint) {
  return (std::filesystem::path(checkpoint) / kDenseFile).string();
}

}  // namespace

absl::Status DlrmWorker::RestoreTables() {
  if (o_.restore.empty()) return absl::OkStatus();
  const std::string key = absl::StrCat(o_.job.job_name, "/restore_checkpoint");
  if (o_.job.rank == 0) {
    ASSIGN_OR_RETURN(restore_dir_, checkpoint::ResolveCheckpoint(o_.restore));
    const absl::Time start = absl::Now();
    absl::StatusOr<proto::LoadResponse> loaded = client_->Load(restore_dir_);
    if (!loaded.ok()) {
      return absl::Status(
          loaded.status().code(),
          absl::StrCat("restoring the tables of '", restore_dir_,
                       "' into the servers: ", loaded.status().message(),
                       " (restore into freshly started servers)"));
    }
    log_->info("restored the tables of '{}' (step {}) in {:.2f} s",
               restore_dir_, loaded->step(),
               absl::ToDoubleSeconds(absl::Now() - start));
    return o_.job.store->Set(key, restore_dir_);
  }
  RETURN_IF_ERROR(o_.job.store->Wait({key}, o_.job.timeout));
  ASSIGN_OR_RETURN(restore_dir_, o_.job.store->Get(key));
  return absl::OkStatus();
}

absl::StatusOr<DlrmWorker::RestoredDense> DlrmWorker::ReadRestoredDense()
    const {
  ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest,
                   checkpoint::ReadManifest(restore_dir_));
  ASSIGN_OR_RETURN(
      std::optional<std::string> bytes,
      checkpoint::ReadExtraFile(restore_dir_, manifest, kDenseFile));
  if (!bytes.has_value()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", restore_dir_,
        "' holds no dense parameters (written by a trainer that does not "
        "save them?)"));
  }
  RestoredDense restored;
  restored.bytes = *std::move(bytes);
  restored.step = manifest.step();
  return restored;
}

absl::Status DlrmWorker::KeepTrainedInputLayout() {
  if (!schema_.has_value()) return absl::OkStatus();
  const dense::InputLayout recomputed = InputLayoutOf(*schema_);
  if (!restore_dir_.empty() && recomputed.standardized_size() > 0) {
    ASSIGN_OR_RETURN(restored_dense_, ReadRestoredDense());
    ASSIGN_OR_RETURN(const dense::InputLayout trained,
                     dense::ReadInputLayout(restored_dense_->bytes,
                                            DensePathIn(restore_dir_)));
    if (trained.standardized().empty()) {
      log_->warn(
          "checkpoint '{}' records no STANDARDIZE statistics: using those of "
          "the training files",
          restore_dir_);
    } else {
      if (absl::Status s = UseRecordedStatistics(trained, &*schema_); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("restoring '", restore_dir_,
                                                   "': ", s.message()));
      }
      // The files' own statistics (computed before the model's replaced
      // them), compared without the header.
      dense::InputLayout files = recomputed, model = trained;
      files.clear_header();
      model.clear_header();
      if (files.SerializeAsString() != model.SerializeAsString()) {
        log_->info(
            "keeping the STANDARDIZE statistics the model of '{}' was trained "
            "with; the training files' differ",
            restore_dir_);
      }
    }
  }
  input_layout_ = InputLayoutOf(*schema_);
  return absl::OkStatus();
}

absl::Status DlrmWorker::RestoreDense() {
  if (restore_dir_.empty()) return absl::OkStatus();
  if (!restored_dense_.has_value()) {
    ASSIGN_OR_RETURN(restored_dense_, ReadRestoredDense());
  }
  const RestoredDense restored = *std::move(restored_dense_);  // read once
  restored_dense_.reset();
  const std::string path = DensePathIn(restore_dir_);
  ASSIGN_OR_RETURN(const int64_t step,
                   dense::LoadParametersFromBytes(restored.bytes, path, *model_,
                                                  optimizer_.get()));
  if (step != static_cast<int64_t>(restored.step)) {
    return absl::DataLossError(
        absl::StrCat("dense parameters '", path, "' are of step ", step,
                     "; the checkpoint is of step ", restored.step));
  }
  start_step_ = step;
  log_->info("worker {}: resuming at step {} from '{}'", o_.job.rank, step,
             restore_dir_);
  return absl::OkStatus();
}

absl::Status DlrmWorker::Checkpoint(int64_t steps_done, PreparedStep* pushing,
                                    DlrmJobResult& result) {
  const absl::Time start = absl::Now();
  // Every rank's pushes of the step are in (SYNC: applied, since the last
  // one applies the step), and no rank pushes the next step before the
  // snapshot: the checkpoint holds exactly `steps_done` steps.
  if (pushing != nullptr) RETURN_IF_ERROR(AwaitPushes(*pushing));
  RETURN_IF_ERROR(communicator_->Barrier());
  if (o_.job.rank == 0) {
    // The tier's rows are in the snapshot.
    RETURN_IF_ERROR(WriteBackHotRows(steps_done, result));
    // The previous checkpoint must be complete: it is this one's parent.
    RETURN_IF_ERROR(AwaitCheckpoint(result));
    client::Client::CheckpointOptions options;
    options.root = c_.checkpoint_dir();
    options.step = static_cast<uint64_t>(steps_done);
    // Chains of increments end every full_checkpoint_every checkpoints,
    // so that retention can delete what is older.
    const int32_t full_every =
        c_.full_checkpoint_every() > 0 ? c_.full_checkpoint_every() : 10;
    options.incremental = c_.incremental_checkpoints() &&
                          since_full_checkpoint_ >= 0 &&
                          since_full_checkpoint_ + 1 < full_every;
    since_full_checkpoint_ =
        options.incremental ? since_full_checkpoint_ + 1 : 0;
    options.keep = c_.keep_checkpoints();
    ASSIGN_OR_RETURN(std::unique_ptr<client::Client::PendingCheckpoint> pending,
                     client_->StartCheckpoint(options));
    RETURN_IF_ERROR(dense::SaveParameters(
        *model_, steps_done,
        (std::filesystem::path(pending->directory()) / kDenseFile).string(),
        optimizer_.get(), &input_layout_));
    finishing_ = std::async(
        std::launch::async,
        [log = log_, pending = std::move(pending)]()
            -> absl::StatusOr<proto::CheckpointManifest> {
          absl::StatusOr<proto::CheckpointManifest> manifest =
              pending->Finish({kDenseFile});
          for (const std::string& name : pending->pruned()) {
            log->info("retention: deleted checkpoint '{}'", name);
          }
          if (!pending->prune_status().ok()) {
            log->warn("retention: {}", pending->prune_status().ToString());
          }
          return manifest;
        });
  }
  RETURN_IF_ERROR(communicator_->Barrier());
  const double pause = absl::ToDoubleSeconds(absl::Now() - start);
  result.checkpoint_pause_max_seconds =
      std::max(result.checkpoint_pause_max_seconds, pause);
  result.checkpoint_pause_total_seconds += pause;
  return absl::OkStatus();
}

absl::Status DlrmWorker::AwaitCheckpoint(DlrmJobResult& result) {
  if (!finishing_.valid()) return absl::OkStatus();
  absl::StatusOr<proto::CheckpointManifest> manifest = finishing_.get();
  if (!manifest.ok()) {
    return absl::Status(
        manifest.status().code(),
        absl::StrCat("checkpoint: ", manifest.status().message()));
  }
  ++result.checkpoints;
  result.last_checkpoint =
      (std::filesystem::path(c_.checkpoint_dir()) / manifest->name()).string();
  log_->info("checkpoint '{}' complete (step {})", result.last_checkpoint,
             manifest->step());
  return absl::OkStatus();
}

absl::Status DlrmWorker::Publish(int64_t steps) {
  ASSIGN_OR_RETURN(
      const std::string dense,
      dense::SerializeParameters(*model_, steps, nullptr, &input_layout_));
  ASSIGN_OR_RETURN(const uint64_t rows,
                   client_->Publish(static_cast<uint64_t>(steps), dense));
  ++metrics_.publications;
  last_published_step_ = steps;
  log_->debug("published step {}: {} rows", steps, rows);
  return absl::OkStatus();
}

}  // namespace embedps::worker::dlrm_internal
