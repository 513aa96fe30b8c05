#include "worker/dlrm_job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "checkpoint/manifest.h"
#include "client/client.h"
#include "common/file_io.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "data/feature_schema.h"
#include "dense/blas.h"
#include "dense/data_parallel.h"
#include "dense/eval_metrics.h"
#include "dense/unique_rows.h"
#include "worker/collective.h"
#include "worker/job_data.h"
#include "worker/key_dedup.h"
#include "worker/worker_metrics.h"

namespace embedps::worker {
namespace {

// Predictions kept for the running training AUC.
constexpr size_t kAucWindow = 1 << 16;
// Test batches: large, forward only.
constexpr int kEvalBatch = 4096;

// The dense parameters' file in a checkpoint.
constexpr const char* kDenseFile = checkpoint::kDenseParametersFile;

// One step's batch, its unique keys per table, and their rows.
// The rows and gradients are in the model's host memory (page-locked for
// CUDA), grow-only: a step uses the first unique × dim floats of each.
struct TableBatch {
  std::vector<uint64_t> unique;
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
  // Cancels the step's Pulls still in flight and waits for them.
  void CancelPulls(PreparedStep& step);
  // A step done with (its Pushes finished) goes back for reuse.
  void Recycle(std::unique_ptr<PreparedStep> step);
  // The model's input for a prepared batch (after its Pulls).
  dense::UniqueRowsBatch ModelBatch(const PreparedStep& step) const;
  // DlrmJobOptions::stages_on_host: the step with the host's stages.
  absl::StatusOr<float> StepWithHostStages(
      const dense::UniqueRowsBatch& batch, float scale,
      absl::Span<const absl::Span<float>> table_gradients,
      const std::function<void()>& ready);
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
  // After `steps_done` steps (their pushes in `pushing`): all ranks meet,
  // rank 0 snapshots the tables and saves the dense state, all ranks meet
  // again; the files are finished in the background.
  absl::Status Checkpoint(int64_t steps_done, PreparedStep* pushing,
                          DlrmJobResult& result);
  // Rank 0: waits for the checkpoint being finished, if any.
  absl::Status AwaitCheckpoint(DlrmJobResult& result);
  // Publishes the tables and the dense model after `steps` steps.
  absl::Status Publish(int64_t steps);
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
  std::unique_ptr<JobData> reader_;
  config::Mode mode_;
  int64_t total_steps_ = 0;
  // Restore.
  std::string restore_dir_;
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
  // stages_on_host: the bags' rows and their gradients (grow-only).
  std::vector<dense::HostArray> slot_rows_, slot_grads_;
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

absl::Status DlrmWorker::Setup() {
  RETURN_IF_ERROR(config::ValidateWorkerConfig(c_));
  ASSIGN_OR_RETURN(mode_, config::ParseMode(c_.mode()));
  metrics_.rank = o_.job.rank;
  if (o_.metrics_port >= 0) {
    ASSIGN_OR_RETURN(
        endpoint_,
        MetricsEndpoint::Start(&metrics_, o_.metrics_host, o_.metrics_port));
    log_->info("worker {}: metrics on http://{}:{}/metrics", o_.job.rank,
               o_.metrics_host, endpoint_->port());
    if (!o_.metrics_port_file.empty()) {
      const std::string tmp = o_.metrics_port_file + ".tmp";
      std::ofstream(tmp) << endpoint_->port() << "\n";
      std::rename(tmp.c_str(), o_.metrics_port_file.c_str());
    }
  }
  dim_ = c_.embedding_dim();
  dense::SetDenseThreads(c_.blas_threads() > 0 ? c_.blas_threads() : 1);

  client::ClientOptions client_options;
  client_options.servers = o_.servers;
  client_options.cluster_id = o_.cluster_id;
  client_options.retry.retry_deadline = o_.retry_deadline;
  client_options.security = o_.security;
  ASSIGN_OR_RETURN(client_, client::Client::Connect(client_options));
  RETURN_IF_ERROR(RestoreTables());
  absl::flat_hash_map<std::string, int> table_index;
  for (const proto::TableConfig& table : c_.table()) {
    proto::TableConfig config = table;
    config.mutable_consistency()->set_mode(mode_.mode);
    config.mutable_consistency()->set_staleness(mode_.staleness);
    config.mutable_consistency()->set_timeout_ms(
        int64_t{c_.step_timeout_s() > 0 ? c_.step_timeout_s() : 300} * 1000);
    absl::StatusOr<client::TableHandle> handle = client_->CreateTable(config);
    if (!handle.ok()) {
      return absl::Status(
          handle.status().code(),
          absl::StrCat("creating table '", table.name(),
                       "' on the servers: ", handle.status().message()));
    }
    table_index[table.name()] = static_cast<int>(handles_.size());
    table_names_.push_back(table.name());
    handles_.push_back(*handle);
  }
  for (const std::string& table : config::SlotTables(c_)) {
    slot_table_.push_back(table_index.at(table));
  }
  dedup_ = std::make_unique<KeyDeduplicator>(
      slot_table_, static_cast<int>(handles_.size()),
      static_cast<int>(
          std::clamp(std::thread::hardware_concurrency(), 1u, 8u)));

  ASSIGN_OR_RETURN(schema_, JobData::PrepareSchema(c_));
  data::BatchReaderOptions reader;
  reader.files.assign(c_.train_files().begin(), c_.train_files().end());
  reader.batch_size = c_.batch_size() > 0 ? c_.batch_size() : 512;
  reader.worker_index = o_.job.rank;
  reader.num_workers = o_.job.world_size;
  reader.epochs = c_.epochs() > 0 ? c_.epochs() : 1;
  reader.fatal_bad_lines = c_.fatal_bad_lines();
  ASSIGN_OR_RETURN(reader_, JobData::Open(reader, schema_));
  total_steps_ = reader_->total_steps();
  if (c_.max_steps() > 0) total_steps_ = std::min(total_steps_, c_.max_steps());
  metrics_.total_steps = total_steps_;

  ASSIGN_OR_RETURN(model_,
                   dense::CreateModel(config::ModelSpecOf(c_), o_.model));
  ASSIGN_OR_RETURN(
      dense::DenseOptimizerSpec optimizer,
      config::DenseOptimizerOf(c_.dense_optimizer(), total_steps_));
  ASSIGN_OR_RETURN(optimizer_, dense::DenseOptimizer::Create(
                                   optimizer, model_->num_parameters()));
  RETURN_IF_ERROR(RestoreDense());
  log_->info(
      "worker {}/{}: {} servers, {} tables, {} steps of {} samples, "
      "mode {}, {} dense parameters on {}",
      o_.job.rank, o_.job.world_size, o_.servers.size(), handles_.size(),
      total_steps_, reader.batch_size, c_.mode().empty() ? "sync" : c_.mode(),
      model_->num_parameters(), dense::BackendName(o_.model.backend));
  ASSIGN_OR_RETURN(communicator_, ConnectCollective(o_.job, o_.model));
  ASSIGN_OR_RETURN(trainer_,
                   dense::DataParallelTrainer::Create(
                       model_.get(), communicator_.get(), optimizer_.get()));
  return absl::OkStatus();
}

// `array` with room for `size` floats: a new one from `model` when it has
// less (a quarter more, so that steps of varying sizes soon stop growing).
absl::Status Reserve(dense::Model& model, dense::HostArray& array,
                     size_t size) {
  if (array.size() >= size) return absl::OkStatus();
  ASSIGN_OR_RETURN(array, model.NewHostArray(size + size / 4));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PreparedStep>> DlrmWorker::Prepare(
    data::SchemaBatch batch, uint64_t pull_step, bool read_only) {
  std::unique_ptr<PreparedStep> step;
  if (spare_steps_.empty()) {
    step = std::make_unique<PreparedStep>();
  } else {
    step = std::move(spare_steps_.back());
    spare_steps_.pop_back();
  }
  step->batch = std::move(batch);
  step->tables.resize(handles_.size());
  std::vector<absl::Span<const uint64_t>> keys;
  for (const data::SchemaBatch::Bags& bags : step->batch.slots) {
    keys.push_back(bags.keys);
  }
  dedup_->Run(keys, unique_scratch_, step->index);
  // Every buffer first: no Pull is in flight when one cannot be had.
  for (size_t t = 0; t < handles_.size(); ++t) {
    TableBatch& table = step->tables[t];
    table.unique.swap(unique_scratch_[t]);
    RETURN_IF_ERROR(Reserve(*model_, table.rows, table.unique.size() * dim_));
  }
  step->canceller = std::make_unique<client::Client::CallCanceller>();
  for (size_t t = 0; t < handles_.size(); ++t) {
    TableBatch& table = step->tables[t];
    const absl::Span<float> rows =
        table.rows.span().first(table.unique.size() * dim_);
    step->pulls.push_back(
        read_only ? client_->LookupAsync(
                        handles_[t], table.unique, rows, pull_step,
                        client::Client::Keys::kUnique, step->canceller.get())
                  : client_->PullAsync(handles_[t], table.unique, rows,
                                       pull_step, client::Client::Keys::kUnique,
                                       step->canceller.get()));
  }
  return step;
}

void DlrmWorker::CancelPulls(PreparedStep& step) {
  if (step.canceller != nullptr) step.canceller->Cancel();
  AwaitPulls(step).IgnoreError();
}

void DlrmWorker::Recycle(std::unique_ptr<PreparedStep> step) {
  if (step == nullptr) return;
  step->pulls.clear();
  step->pushes.clear();
  spare_steps_.push_back(std::move(step));
}

absl::Status DlrmWorker::AwaitPulls(PreparedStep& step) {
  absl::Status first;
  for (size_t t = 0; t < step.pulls.size(); ++t) {
    absl::Status s = step.pulls[t].get();
    if (!s.ok() && first.ok()) {
      first = absl::Status(s.code(),
                           absl::StrCat("Pull from table '", table_names_[t],
                                        "': ", s.message()));
    }
  }
  step.pulls.clear();
  return first;
}

dense::UniqueRowsBatch DlrmWorker::ModelBatch(const PreparedStep& step) const {
  dense::UniqueRowsBatch batch;
  batch.size = step.batch.size;
  batch.dense = step.batch.dense;
  batch.labels = step.batch.labels;
  for (const TableBatch& table : step.tables) {
    batch.tables.push_back(table.rows.span().first(table.unique.size() * dim_));
  }
  for (size_t s = 0; s < slot_table_.size(); ++s) {
    const data::SchemaBatch::Bags& bags = step.batch.slots[s];
    batch.slots.push_back(
        {slot_table_[s], step.index[s], bags.offsets, bags.weights});
  }
  return batch;
}

absl::StatusOr<float> DlrmWorker::StepWithHostStages(
    const dense::UniqueRowsBatch& batch, float scale,
    absl::Span<const absl::Span<float>> table_gradients,
    const std::function<void()>& ready) {
  RETURN_IF_ERROR(dense::ValidateUniqueRowsBatch(model_->spec(), batch,
                                                 /*with_labels=*/true));
  const size_t slots = batch.slots.size();
  slot_rows_.resize(slots);
  slot_grads_.resize(slots);
  dense::Batch<float> bags;
  bags.size = batch.size;
  bags.dense = batch.dense;
  bags.labels = batch.labels;
  std::vector<absl::Span<float>> rows, grads;
  std::vector<absl::Span<const float>> summed;
  for (size_t s = 0; s < slots; ++s) {
    const size_t size = batch.slots[s].index.size() * dim_;
    RETURN_IF_ERROR(Reserve(*model_, slot_rows_[s], size));
    RETURN_IF_ERROR(Reserve(*model_, slot_grads_[s], size));
    rows.push_back(slot_rows_[s].span().first(size));
    grads.push_back(slot_grads_[s].span().first(size));
    summed.push_back(grads.back());
    bags.slots.push_back({rows.back(), batch.slots[s].offsets});
  }
  dense::GatherSlotRows(batch, dim_, rows, dense::DenseThreads());
  return trainer_->Step(bags, grads, [&] {
    dense::SumUniqueRowGradients(batch, dim_, summed, scale, table_gradients,
                                 dense::DenseThreads());
    ready();
  });
}

absl::StatusOr<float> DlrmWorker::TrainOn(PreparedStep& step) {
  const int n = step.batch.size;
  if (n == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step ", step.batch.step, " of worker ", o_.job.rank,
        " has no valid line (every line of its batch was malformed); the "
        "data-parallel step cannot run without samples"));
  }
  const dense::UniqueRowsBatch batch = ModelBatch(step);
  std::vector<absl::Span<float>> grads;
  for (TableBatch& table : step.tables) {
    const size_t size = table.unique.size() * dim_;
    RETURN_IF_ERROR(Reserve(*model_, table.grads, size));
    grads.push_back(table.grads.span().first(size));
  }
  const absl::Time compute_start = absl::Now();
  // Row gradients summed per unique key, and the Pushes started as soon as
  // they exist: the servers apply them (and serve the next step's Pulls,
  // which SYNC holds until then) while the dense half finishes its step.
  // SYNC: the servers sum every worker's push, so each sends 1/W of its
  // mean-loss gradient.
  const float scale = mode_.mode == proto::ConsistencyConfig::SYNC
                          ? 1.0f / static_cast<float>(o_.job.world_size)
                          : 1.0f;
  const auto push = [&] {
    for (size_t t = 0; t < handles_.size(); ++t) {
      step.pushes.push_back(
          client_->PushAsync(handles_[t], step.tables[t].unique, grads[t],
                             step.batch.step, client::Client::Keys::kUnique));
    }
  };
  absl::StatusOr<float> loss =
      o_.stages_on_host ? StepWithHostStages(batch, scale, grads, push)
                        : trainer_->StepOnUniqueRows(batch, scale, grads, push);
  logits_.resize(n);
  if (loss.ok()) {
    if (absl::Status s = model_->LastLogits(absl::MakeSpan(logits_)); !s.ok()) {
      loss = s;
    }
  }
  if (!loss.ok()) {
    // The Pushes borrow the step's buffers: done before they go.
    AwaitPushes(step).IgnoreError();
    return loss.status();
  }
  for (int i = 0; i < n; ++i) {
    window_.emplace_back(logits_[i], step.batch.labels[i]);
  }
  while (window_.size() > kAucWindow) window_.pop_front();
  metrics_.compute_seconds = metrics_.compute_seconds +
                             absl::ToDoubleSeconds(absl::Now() - compute_start);
  return loss;
}

absl::Status DlrmWorker::AwaitPushes(PreparedStep& step) {
  const absl::Time start = absl::Now();
  absl::Status first;
  for (size_t t = 0; t < step.pushes.size(); ++t) {
    absl::Status s = step.pushes[t].get();
    if (!s.ok() && first.ok()) {
      first = absl::Status(
          s.code(), absl::StrCat("step ", step.batch.step, ": Push to table '",
                                 table_names_[t], "': ", s.message()));
    }
  }
  step.pushes.clear();
  metrics_.push_seconds =
      metrics_.push_seconds + absl::ToDoubleSeconds(absl::Now() - start);
  return first;
}

absl::StatusOr<EvalPoint> DlrmWorker::Evaluate(int64_t trained_steps) {
  if (test_batches_.empty()) {
    // Parsed once, kept for every later evaluation.
    data::BatchReaderOptions options;
    options.files.assign(c_.test_files().begin(), c_.test_files().end());
    options.batch_size = kEvalBatch;
    options.include_tail = true;
    options.name = "test";
    ASSIGN_OR_RETURN(std::unique_ptr<JobData> reader,
                     JobData::Open(options, schema_));
    while (true) {
      ASSIGN_OR_RETURN(std::optional<data::SchemaBatch> batch, reader->Next());
      if (!batch.has_value()) break;
      if (batch->size > 0) test_batches_.push_back(std::move(*batch));
    }
  }
  std::vector<float> logits, labels, batch_logits;
  for (const data::SchemaBatch& batch : test_batches_) {
    // Read-only, at the next step: the evaluation changes no table (no rows
    // for test-only keys), and SYNC/SSP wait for the steps trained so far.
    ASSIGN_OR_RETURN(std::unique_ptr<PreparedStep> step,
                     Prepare(batch, static_cast<uint64_t>(trained_steps),
                             /*read_only=*/true));
    RETURN_IF_ERROR(AwaitPulls(*step));
    batch_logits.resize(step->batch.size);
    RETURN_IF_ERROR(model_->PredictOnUniqueRows(ModelBatch(*step),
                                                absl::MakeSpan(batch_logits)));
    logits.insert(logits.end(), batch_logits.begin(), batch_logits.end());
    labels.insert(labels.end(), step->batch.labels.begin(),
                  step->batch.labels.end());
    Recycle(std::move(step));
  }
  EvalPoint point;
  point.step = trained_steps;
  point.auc = dense::RocAuc(logits, labels);
  point.logloss = dense::MeanLogLoss(logits, labels);
  metrics_.test_auc = point.auc;
  metrics_.test_logloss = point.logloss;
  return point;
}

void DlrmWorker::Progress(int64_t step, int64_t total, bool force) {
  const int64_t every = c_.log_every_steps() > 0 ? c_.log_every_steps() : 100;
  if (!force && step % every != 0) return;
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  const double rate = seconds > 0 ? samples_ * o_.job.world_size / seconds : 0;
  std::vector<float> scores, labels;
  for (const auto& [logit, label] : window_) {
    scores.push_back(logit);
    labels.push_back(label);
  }
  const double auc = dense::RocAuc(scores, labels);
  const double loss = loss_count_ > 0 ? loss_sum_ / loss_count_ : 0;
  const int64_t done = step - start_step_;
  const double eta = done > 0 ? seconds / done * (total - step) : 0;
  metrics_.train_loss = loss;
  metrics_.train_auc = auc;
  history_.push_back(absl::StrFormat("%d,%d,%.6f,%.6f,,,%.3f", step,
                                     samples_ * o_.job.world_size, loss, auc,
                                     seconds));
  const std::string line = absl::StrFormat(
      "step %d/%d | %.0f samples/s | loss %.4f | train auc %.4f | eta %.0fs",
      step, total, rate, loss, auc, eta);
  loss_sum_ = 0;
  loss_count_ = 0;
  if (o_.progress_in_place) {
    std::fprintf(stderr, "\r%s   ", line.c_str());
    if (force) std::fprintf(stderr, "\n");
  } else {
    log_->info("worker {}: {}", o_.job.rank, line);
  }
}

absl::StatusOr<DlrmJobResult> DlrmWorker::Run() {
  RETURN_IF_ERROR(Setup());
  DlrmJobResult result;
  if (!c_.bayes_metrics_file().empty()) {
    if (absl::Status s = ReadBayesMetrics(c_.bayes_metrics_file(), result);
        !s.ok() && o_.job.rank == 0) {
      log_->warn("no Bayes-optimal metrics: {}", s.message());
    }
  }
  const bool evaluates = o_.job.rank == 0 && c_.test_files_size() > 0;
  const int64_t tail_from =
      total_steps_ - std::max<int64_t>(1, total_steps_ / 10);
  double tail_sum = 0;
  int64_t tail_count = 0;
  start_ = absl::Now();

  result.start_step = start_step_;
  result.restored_from = restore_dir_;
  // A resumed run skips the batches the checkpoint has seen.
  for (int64_t skipped = 0; skipped < start_step_ && skipped < total_steps_;
       ++skipped) {
    ASSIGN_OR_RETURN(std::optional<data::SchemaBatch> batch, reader_->Next());
    if (!batch.has_value()) break;
  }
  const bool checkpoints = !c_.checkpoint_dir().empty();
  // Rank 0 publishes to serving replicas: at the start (which starts the
  // shards' change logs), every publish_every_seconds, and at the end.
  const bool publishes = o_.job.rank == 0 && c_.publish_every_seconds() > 0;
  absl::Time next_publish =
      absl::Now() + absl::Seconds(c_.publish_every_seconds());
  if (publishes) RETURN_IF_ERROR(Publish(start_step_));
  std::unique_ptr<PreparedStep> current, pushing;
  if (start_step_ < total_steps_) {
    ASSIGN_OR_RETURN(std::optional<data::SchemaBatch> first, reader_->Next());
    if (!first.has_value()) {
      return absl::InternalError("the reader ended before its first step");
    }
    ASSIGN_OR_RETURN(current, Prepare(std::move(*first),
                                      static_cast<uint64_t>(start_step_)));
  }
  for (int64_t step = start_step_; step < total_steps_; ++step) {
    const absl::Time pull_start = absl::Now();
    RETURN_IF_ERROR(AwaitPulls(*current));
    metrics_.pull_wait_seconds =
        metrics_.pull_wait_seconds +
        absl::ToDoubleSeconds(absl::Now() - pull_start);
    // The next batch's Pull runs while this one computes.
    std::unique_ptr<PreparedStep> next;
    if (step + 1 < total_steps_) {
      const absl::Time read_start = absl::Now();
      ASSIGN_OR_RETURN(std::optional<data::SchemaBatch> batch, reader_->Next());
      if (!batch.has_value()) {
        return absl::InternalError(
            absl::StrCat("the reader ended at step ", step + 1));
      }
      const absl::Time prepare_start = absl::Now();
      result.read_seconds += absl::ToDoubleSeconds(prepare_start - read_start);
      absl::StatusOr<std::unique_ptr<PreparedStep>> prepared =
          Prepare(std::move(*batch), static_cast<uint64_t>(step + 1));
      result.prepare_seconds +=
          absl::ToDoubleSeconds(absl::Now() - prepare_start);
      if (!prepared.ok()) {
        // In-flight calls borrow the steps' buffers: done before they go.
        if (pushing != nullptr) AwaitPushes(*pushing).IgnoreError();
        return prepared.status();
      }
      next = *std::move(prepared);
    }
    absl::StatusOr<float> loss = TrainOn(*current);
    if (!loss.ok()) {
      if (next != nullptr) CancelPulls(*next);
      if (pushing != nullptr) AwaitPushes(*pushing).IgnoreError();
      return absl::Status(
          loss.status().code(),
          absl::StrCat("step ", step, ": ", loss.status().message()));
    }
    samples_ += current->batch.size;
    for (const data::SchemaBatch::Bags& bags : current->batch.slots) {
      result.keys += static_cast<int64_t>(bags.keys.size());
    }
    for (const TableBatch& table : current->tables) {
      result.keys_pulled += static_cast<int64_t>(table.unique.size());
    }
    metrics_.steps = step + 1;
    metrics_.samples = samples_;
    metrics_.bad_lines = reader_->stats().bad_lines;
    loss_sum_ += *loss;
    ++loss_count_;
    if (step >= tail_from) {
      tail_sum += *loss;
      ++tail_count;
    }
    // This step's Pushes run while the next step computes; the previous
    // step's must be done by now.
    if (pushing != nullptr) RETURN_IF_ERROR(AwaitPushes(*pushing));
    Recycle(std::move(pushing));
    pushing = std::move(current);
    current = std::move(next);
    Progress(step + 1, total_steps_, step + 1 == total_steps_);
    if (checkpoints && c_.checkpoint_every_steps() > 0 &&
        (step + 1) % c_.checkpoint_every_steps() == 0 &&
        step + 1 < total_steps_) {
      RETURN_IF_ERROR(Checkpoint(step + 1, pushing.get(), result));
    }
    if (publishes && absl::Now() >= next_publish && step + 1 < total_steps_) {
      // This step's pushes first: the shards publish once it is applied.
      RETURN_IF_ERROR(AwaitPushes(*pushing));
      RETURN_IF_ERROR(Publish(step + 1));
      next_publish = absl::Now() + absl::Seconds(c_.publish_every_seconds());
    }
    if (evaluates && c_.eval_every_steps() > 0 &&
        (step + 1) % c_.eval_every_steps() == 0 && step + 1 < total_steps_) {
      RETURN_IF_ERROR(AwaitPushes(*pushing));
      ASSIGN_OR_RETURN(EvalPoint point, Evaluate(step + 1));
      log_->info("step {}: test auc {:.5f} logloss {:.5f}", point.step,
                 point.auc, point.logloss);
      history_.push_back(absl::StrFormat("%d,,,,%.6f,%.6f,", point.step,
                                         point.auc, point.logloss));
      result.evals.push_back(point);
    }
  }
  if (pushing != nullptr) RETURN_IF_ERROR(AwaitPushes(*pushing));
  if (publishes && total_steps_ > start_step_) {
    RETURN_IF_ERROR(Publish(total_steps_));
  }
  if (checkpoints && total_steps_ > start_step_) {
    RETURN_IF_ERROR(Checkpoint(total_steps_, pushing.get(), result));
  }
  if (o_.job.rank == 0) RETURN_IF_ERROR(AwaitCheckpoint(result));
  result.steps = total_steps_;
  result.samples = samples_;
  result.publications = metrics_.publications.load();
  result.last_published_step = last_published_step_;
  result.train_seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  result.samples_per_second =
      result.train_seconds > 0
          ? samples_ * o_.job.world_size / result.train_seconds
          : 0;
  result.final_train_loss = tail_count > 0 ? tail_sum / tail_count : 0;
  const data::BatchReaderStats stats = reader_->stats();
  result.bad_lines = stats.bad_lines;
  if (const int64_t dropped = reader_->values_dropped(); dropped > 0) {
    log_->warn(
        "worker {}: {} ids left out past their column's max_values "
        "(schema.sparse)",
        o_.job.rank, dropped);
  }
  result.parse_lines_per_second =
      stats.parse_seconds > 0 ? stats.lines_parsed / stats.parse_seconds : 0;
  result.pull_wait_seconds = metrics_.pull_wait_seconds;
  result.compute_seconds = metrics_.compute_seconds;
  result.push_seconds = metrics_.push_seconds;
  {
    const dense::ModelSpec spec = config::ModelSpecOf(c_);
    const double bags =
        static_cast<double>(samples_) * std::max<size_t>(1, spec.slots.size());
    result.flops_per_sample = dense::TrainingFlopsPerSample(
        spec, dense::LayoutOf(spec),
        samples_ > 0 ? static_cast<double>(result.keys) / bags : 1.0);
  }
  if (evaluates) {
    ASSIGN_OR_RETURN(EvalPoint point, Evaluate(total_steps_));
    log_->info(
        "final: test auc {:.5f} logloss {:.5f}{}", point.auc, point.logloss,
        result.bayes_test_auc > 0
            ? absl::StrFormat(" (Bayes-optimal auc %.5f logloss %.5f)",
                              result.bayes_test_auc, result.bayes_test_logloss)
            : "");
    history_.push_back(absl::StrFormat("%d,,,,%.6f,%.6f,", point.step,
                                       point.auc, point.logloss));
    result.evals.push_back(point);
  }
  // Every worker waits for the others before leaving: a SYNC peer may
  // still need this worker's pushes to finish its last step.
  RETURN_IF_ERROR(communicator_->Barrier());
  if (o_.job.rank == 0) {
    ASSIGN_OR_RETURN(const std::vector<proto::StatsResponse> shards,
                     client_->Stats());
    for (const proto::StatsResponse& shard : shards) {
      for (const proto::TableStatsProto& table : shard.table()) {
        result.table_rows += static_cast<int64_t>(table.rows());
        result.rows_evicted += static_cast<int64_t>(table.evicted());
      }
    }
    RETURN_IF_ERROR(WriteOutputs(result));
  }
  return result;
}

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

absl::Status DlrmWorker::RestoreDense() {
  if (restore_dir_.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const proto::CheckpointManifest manifest,
                   checkpoint::ReadManifest(restore_dir_));
  const proto::CheckpointExtraFile* dense_file = nullptr;
  for (const proto::CheckpointExtraFile& file : manifest.extra_file()) {
    if (file.path() == kDenseFile) dense_file = &file;
  }
  const std::string path =
      (std::filesystem::path(restore_dir_) / kDenseFile).string();
  if (dense_file == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint '", restore_dir_,
        "' holds no dense parameters (written by a trainer that does not "
        "save them?)"));
  }
  ASSIGN_OR_RETURN(const uint32_t crc, FileCrc32(path));
  if (crc != dense_file->crc32()) {
    return absl::DataLossError(absl::StrCat("dense parameters '", path,
                                            "' fail the manifest's checksum"));
  }
  ASSIGN_OR_RETURN(const int64_t step,
                   dense::LoadParameters(path, *model_, optimizer_.get()));
  if (step != static_cast<int64_t>(manifest.step())) {
    return absl::DataLossError(
        absl::StrCat("dense parameters '", path, "' are of step ", step,
                     "; the checkpoint is of step ", manifest.step()));
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
        optimizer_.get()));
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
  ASSIGN_OR_RETURN(const std::string dense,
                   dense::SerializeParameters(*model_, steps));
  ASSIGN_OR_RETURN(const uint64_t rows,
                   client_->Publish(static_cast<uint64_t>(steps), dense));
  ++metrics_.publications;
  last_published_step_ = steps;
  log_->debug("published step {}: {} rows", steps, rows);
  return absl::OkStatus();
}

absl::Status DlrmWorker::WriteOutputs(const DlrmJobResult& result) {
  if (c_.output_dir().empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(c_.output_dir(), error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create output_dir ", c_.output_dir(), ": ", error.message()));
  }
  const std::string dir = c_.output_dir();
  RETURN_IF_ERROR(
      dense::SaveParameters(*model_, result.steps, dir + "/dense.params"));
  std::ofstream history(dir + "/history.csv", std::ios::trunc);
  history
      << "step,samples,train_loss,train_auc,test_auc,test_logloss,seconds\n";
  for (const std::string& line : history_) history << line << "\n";
  std::ofstream summary(dir + "/summary.json", std::ios::trunc);
  summary << DlrmJobResultJson(o_, result) << "\n";
  if (!history.flush() || !summary.flush()) {
    return absl::UnavailableError(
        absl::StrCat("cannot write the outputs in ", dir));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DlrmJobResult> RunDlrmJob(const DlrmJobOptions& options) {
  RETURN_IF_ERROR(ValidateJobMembership(options.job));
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("the DLRM job needs server addresses");
  }
  DlrmWorker worker(options);
  return worker.Run();
}

}  // namespace embedps::worker
