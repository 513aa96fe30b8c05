// DlrmWorker: the state and steps of one ps_worker of the DLRM job
// (dlrm_job.h), shared by its implementation files: dlrm_job.cc (set-up,
// the step loop, evaluation, outputs) and dlrm_checkpoint.cc (restore,
// checkpoints, publications). Internal to the worker package.
//
// Thread safety: one thread runs a DlrmWorker.
#ifndef EMBEDPS_WORKER_DLRM_WORKER_H_
#define EMBEDPS_WORKER_DLRM_WORKER_H_

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "client/client.h"
#include "common/logging.h"
#include "data/feature_schema.h"
#include "dense/collective/communicator.h"
#include "dense/data_parallel.h"
#include "dense/dense_model.pb.h"
#include "dense/dense_optimizer.h"
#include "dense/host_array.h"
#include "dense/model.h"
#include "dense/unique_rows.h"
#include "proto/checkpoint.pb.h"
#include "worker/dlrm_job.h"
#include "worker/hot_rows.h"
#include "worker/job_data.h"
#include "worker/key_dedup.h"
#include "worker/worker_metrics.h"

namespace embedps::worker::dlrm_internal {

// One step's batch, its unique keys per table, and their rows.
// The rows and gradients are in the model's host memory (page-locked for
// CUDA), grow-only: a step uses the first unique × dim floats of each.
// With a hot-row tier the first `pulled` unique keys are pulled and
// pushed, the others (hot_slots: their slots in the tier) are read from
// and applied to the tier.
struct TableBatch {
  std::vector<uint64_t> unique;
  size_t pulled = 0;
  std::vector<int32_t> hot_slots;
  std::vector<int32_t> remap;  // scratch of the split
  dense::HostArray rows;
  dense::HostArray grads;
};

struct PreparedStep {
  // Calls still in flight borrow the step's buffers: a step that goes
  // (the job stopping on an error) ends its Pulls and waits for its calls.
  ~PreparedStep() {
    if (canceller != nullptr) canceller->Cancel();
    for (std::future<absl::Status>& call : pulls) {
      if (call.valid()) call.wait();
    }
    for (std::future<absl::Status>& call : pushes) {
      if (call.valid()) call.wait();
    }
  }

  data::SchemaBatch batch;
  std::vector<TableBatch> tables;
  // Per slot, per key of its bags: the key's position in its table's
  // unique.
  std::vector<std::vector<int32_t>> index;
  std::vector<std::future<absl::Status>> pulls;
  // Ends the Pulls early when the job stops (a SYNC Pull of the next step
  // waits for a step that will not come).
  std::unique_ptr<client::Client::CallCanceller> canceller;
  // The step's Pushes, in flight while the next step computes.
  std::vector<std::future<absl::Status>> pushes;
};

class DlrmWorker {
 public:
  DlrmWorker(const DlrmJobOptions& options) : o_(options), c_(options.config) {}

  absl::StatusOr<DlrmJobResult> Run();

 private:
  absl::Status Setup();
  // Groups the batch's keys by table, deduplicates them and starts the
  // Pulls (step `pull_step`; read-only Lookups for an evaluation).
  absl::StatusOr<std::unique_ptr<PreparedStep>> Prepare(data::SchemaBatch batch,
                                                        uint64_t pull_step,
                                                        bool read_only = false);
  absl::Status AwaitPulls(PreparedStep& step);
  // After its Pulls: the step's hot rows from the tier (which the steps
  // before have updated).
  void FillHotRows(PreparedStep& step);
  // Waits for the tier's update of the last step (one worker runs it on a
  // thread of its own).
  void AwaitHotApply();
  // A step done with (its Pushes finished) goes back for reuse.
  void Recycle(std::unique_ptr<PreparedStep> step);
  // The model's input for a prepared batch (after its Pulls).
  dense::UniqueRowsBatch ModelBatch(const PreparedStep& step) const;
  // Trains on the step and starts its Pushes (AwaitPushes finishes them).
  absl::StatusOr<float> TrainOn(PreparedStep& step);
  absl::Status AwaitPushes(PreparedStep& step);
  absl::StatusOr<EvalPoint> Evaluate(int64_t trained_steps);
  void Progress(int64_t step, int64_t total, bool force);
  absl::Status WriteOutputs(const DlrmJobResult& result);
  // Rank 0, before the tables are created: loads the checkpoint's tables
  // into the servers and tells the other ranks which checkpoint it is.
  absl::Status RestoreTables();
  // Every rank: the dense parameters and optimizer state, and the step.
  absl::Status RestoreDense();
  // The restored checkpoint's dense parameters (their bytes, checked
  // against its manifest) and the checkpoint's step.
  struct RestoredDense {
    std::string bytes;
    uint64_t step = 0;
  };
  absl::StatusOr<RestoredDense> ReadRestoredDense() const;
  // Every rank, after the schema is prepared: a restored model keeps the
  // STANDARDIZE statistics it was trained with (the training files' may
  // differ: another day's data); input_layout_ is then what the model
  // records.
  absl::Status KeepTrainedInputLayout();
  // After `steps_done` steps (their pushes in `pushing`): all ranks meet,
  // rank 0 snapshots the tables and saves the dense state, all ranks meet
  // again; the files are finished in the background.
  absl::Status Checkpoint(int64_t steps_done, PreparedStep* pushing,
                          DlrmJobResult& result);
  // Rank 0: waits for the checkpoint being finished, if any.
  absl::Status AwaitCheckpoint(DlrmJobResult& result);
  // Publishes the tables and the dense model after `steps` steps.
  absl::Status Publish(int64_t steps);

  // The hot-row tier (dlrm_hot_rows.cc). Setup: the tier, if the config
  // asks for one (refused when it cannot work or fit).
  absl::Status SetupHotRows();
  // Every rank, at a step boundary where no step is prepared with the old
  // set: rank 0 writes the tier back, and the ranks take the N most pulled
  // keys of every table (rank 0's choice) with their rows at `step`.
  absl::Status RefreshHotRows(int64_t step, DlrmJobResult& result);
  // Rank 0 (every rank holds the same rows): the tier's rows back to their
  // shards, after `step` steps.
  absl::Status WriteBackHotRows(int64_t step, DlrmJobResult& result);
  // Whether the hot set is chosen again before step `step`.
  bool HotRowsRefreshDue(int64_t step) const;
  // A prepared step again (its batch split by the current hot set).
  absl::StatusOr<std::unique_ptr<PreparedStep>> Reprepare(
      std::unique_ptr<PreparedStep> step, uint64_t pull_step);
  std::unique_ptr<HotRows> hot_;
  // Per table: whether the tier may hold its rows (no TTL, no max_rows).
  std::vector<bool> hot_table_;
  int64_t hot_refresh_steps_ = 0;
  int64_t hot_warmup_steps_ = 0;
  std::future<void> hot_applying_;
  int64_t last_published_step_ = -1;

  const DlrmJobOptions& o_;
  const config::WorkerConfig& c_;
  std::shared_ptr<spdlog::logger> log_ = Logger("worker");
  int dim_ = 0;
  std::vector<std::string> table_names_;
  std::vector<int> slot_table_;  // slot → index into tables
  std::vector<client::TableHandle> handles_;
  std::unique_ptr<client::Client> client_;
  std::unique_ptr<dense::Model> model_;
  std::unique_ptr<dense::DenseOptimizer> optimizer_;
  std::unique_ptr<dense::Communicator> communicator_;
  std::unique_ptr<dense::DataParallelTrainer> trainer_;
  // The schema of the data (prepared from the training files), if not
  // Criteo's layout.
  std::optional<data::FeatureSchema> schema_;
  // What every dense parameters file written records of the schema.
  dense::InputLayout input_layout_;
  std::unique_ptr<JobData> reader_;
  config::Mode mode_;
  int64_t total_steps_ = 0;
  // Restore.
  std::string restore_dir_;
  // Its dense parameters, when read before RestoreDense.
  std::optional<RestoredDense> restored_dense_;
  int64_t start_step_ = 0;
  // Rank 0: the checkpoint whose files are being finished.
  std::future<absl::StatusOr<proto::CheckpointManifest>> finishing_;
  // Rank 0: checkpoints started since the last full one (the next is full
  // when it reaches full_checkpoint_every).
  int32_t since_full_checkpoint_ = -1;

  std::unique_ptr<KeyDeduplicator> dedup_;
  std::vector<std::vector<uint64_t>> unique_scratch_;
  // Steps done with, and their buffers, for the next ones.
  std::vector<std::unique_ptr<PreparedStep>> spare_steps_;
  std::vector<float> logits_;

  // Progress.
  absl::Time start_;
  int64_t samples_ = 0;
  double loss_sum_ = 0;
  int64_t loss_count_ = 0;
  std::deque<std::pair<float, float>> window_;  // (logit, label)
  std::vector<std::string> history_;
  std::vector<data::SchemaBatch> test_batches_;  // rank 0, after the first eval
  WorkerMetrics metrics_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
};

}  // namespace embedps::worker::dlrm_internal

#endif  // EMBEDPS_WORKER_DLRM_WORKER_H_
