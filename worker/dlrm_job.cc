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

#include "absl/cleanup/cleanup.h"
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
#include "worker/dlrm_worker.h"
#include "worker/job_data.h"
#include "worker/key_dedup.h"
#include "worker/worker_metrics.h"

namespace embedps::worker {
namespace dlrm_internal {
namespace {

// Predictions kept for the running training AUC.
constexpr size_t kAucWindow = 1 << 16;
// Test batches: large, forward only.
constexpr int kEvalBatch = 4096;

}  // namespace

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
  if (o_.job.rank == 0 && !c_.checkpoint_dir().empty()) {
    // Rank 0 checkpoints: a root the shards cannot write fails the job
    // now, not at its first checkpoint.
    if (absl::Status s = client_->CheckCheckpointRoot(c_.checkpoint_dir());
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("checkpoint_dir '", c_.checkpoint_dir(),
                                       "': ", s.message()));
    }
  }
  dedup_ = std::make_unique<KeyDeduplicator>(
      slot_table_, static_cast<int>(handles_.size()),
      static_cast<int>(
          std::clamp(std::thread::hardware_concurrency(), 1u, 8u)));

  ASSIGN_OR_RETURN(schema_, JobData::PrepareSchema(c_));
  RETURN_IF_ERROR(KeepTrainedInputLayout());
  data::BatchReaderOptions reader;
  reader.files.assign(c_.train_files().begin(), c_.train_files().end());
  reader.batch_size = c_.batch_size() > 0 ? c_.batch_size() : 512;
  reader.worker_index = o_.job.rank;
  reader.num_workers = o_.job.world_size;
  reader.epochs = c_.epochs() > 0 ? c_.epochs() : 1;
  reader.fatal_bad_lines = c_.fatal_bad_lines();
  ASSIGN_OR_RETURN(reader_, JobData::Open(reader, schema_));
  if (o_.job.rank == 0) {
    // Read at the first evaluation, possibly after the whole run: a test
    // file that cannot be read fails the job now.
    if (absl::Status s = JobData::CheckReadable(
            {c_.test_files().begin(), c_.test_files().end()}, schema_);
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("test files: ", s.message()));
    }
  }
  total_steps_ = reader_->total_steps();
  if (c_.max_steps() > 0) total_steps_ = std::min(total_steps_, c_.max_steps());
  metrics_.total_steps = total_steps_;

  ASSIGN_OR_RETURN(model_,
                   dense::CreateModel(config::ModelSpecOf(c_), o_.model));
  ASSIGN_OR_RETURN(
      dense::DenseOptimizerSpec optimizer,
      config::DenseOptimizerOf(c_.dense_optimizer(), total_steps_));
  // Its steps run where the parameters are (on the device for CUDA).
  ASSIGN_OR_RETURN(optimizer_, model_->NewOptimizer(optimizer));
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
  return SetupHotRows();
}

namespace {

// `array` with room for `size` floats: a new one from `model` when it has
// less (a quarter more, so that steps of varying sizes soon stop growing).
absl::Status Reserve(dense::Model& model, dense::HostArray& array,
                     size_t size) {
  if (array.size() >= size) return absl::OkStatus();
  ASSIGN_OR_RETURN(array, model.NewHostArray(size + size / 4));
  return absl::OkStatus();
}

}  // namespace

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
    table.pulled = table.unique.size();
    table.hot_slots.clear();
    RETURN_IF_ERROR(Reserve(*model_, table.rows, table.unique.size() * dim_));
  }
  if (hot_ != nullptr) {
    // The tier's keys move behind the pulled ones; the slots' positions
    // follow them.
    for (size_t t = 0; t < handles_.size(); ++t) {
      TableBatch& table = step->tables[t];
      table.pulled = hot_->Split(static_cast<int>(t), table.unique, table.remap,
                                 table.hot_slots);
    }
    for (size_t s = 0; s < slot_table_.size(); ++s) {
      const std::vector<int32_t>& remap = step->tables[slot_table_[s]].remap;
      if (remap.empty()) continue;
      for (int32_t& position : step->index[s]) position = remap[position];
    }
  }
  step->canceller = std::make_unique<client::Client::CallCanceller>();
  for (size_t t = 0; t < handles_.size(); ++t) {
    TableBatch& table = step->tables[t];
    const absl::Span<const uint64_t> pulled =
        absl::MakeConstSpan(table.unique).first(table.pulled);
    const absl::Span<float> rows = table.rows.span().first(table.pulled * dim_);
    step->pulls.push_back(
        read_only ? client_->LookupAsync(handles_[t], pulled, rows, pull_step,
                                         client::Client::Keys::kUnique,
                                         step->canceller.get())
                  : client_->PullAsync(handles_[t], pulled, rows, pull_step,
                                       client::Client::Keys::kUnique,
                                       step->canceller.get()));
  }
  return step;
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

void DlrmWorker::AwaitHotApply() {
  if (hot_applying_.valid()) hot_applying_.get();
}

void DlrmWorker::FillHotRows(PreparedStep& step) {
  if (hot_ == nullptr) return;
  AwaitHotApply();
  for (size_t t = 0; t < step.tables.size(); ++t) {
    TableBatch& table = step.tables[t];
    hot_->Gather(static_cast<int>(t), table.hot_slots,
                 table.rows.span().subspan(table.pulled * dim_,
                                           table.hot_slots.size() * dim_));
  }
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
  // The tier's rows: one worker updates them here, while the device (if
  // any) finishes the step; several after it, with every worker's sums.
  const bool several = o_.job.world_size > 1;
  std::vector<absl::Span<const int32_t>> hot_slots;
  std::vector<absl::Span<const float>> hot_grads;
  if (hot_ != nullptr) {
    for (size_t t = 0; t < handles_.size(); ++t) {
      const TableBatch& table = step.tables[t];
      hot_slots.push_back(table.hot_slots);
      hot_grads.push_back(absl::MakeConstSpan(grads[t]).subspan(
          table.pulled * dim_, table.hot_slots.size() * dim_));
    }
  }
  const auto push = [&] {
    for (size_t t = 0; t < handles_.size(); ++t) {
      const TableBatch& table = step.tables[t];
      step.pushes.push_back(client_->PushAsync(
          handles_[t], absl::MakeConstSpan(table.unique).first(table.pulled),
          absl::MakeConstSpan(grads[t]).first(table.pulled * dim_),
          step.batch.step, client::Client::Keys::kUnique));
    }
    if (hot_ != nullptr && !several) {
      // On a thread of its own, while this step finishes and the servers
      // answer the next step's Pulls: FillHotRows waits for it. (No
      // collective, so no error.)
      hot_applying_ = std::async(
          std::launch::async, [this, slots = hot_slots, grads = hot_grads] {
            hot_->Apply(slots, grads, nullptr).IgnoreError();
          });
    }
  };
  absl::StatusOr<float> loss =
      trainer_->StepOnUniqueRows(batch, scale, grads, push, o_.stages_on_host);
  if (loss.ok() && hot_ != nullptr && several) {
    if (absl::Status s = hot_->Apply(hot_slots, hot_grads, communicator_.get());
        !s.ok()) {
      loss = absl::Status(s.code(),
                          absl::StrCat("the hot rows' sums: ", s.message()));
    }
  }
  logits_.resize(n);
  if (loss.ok()) {
    if (absl::Status s = model_->LastLogits(absl::MakeSpan(logits_)); !s.ok()) {
      loss = s;
    }
  }
  if (!loss.ok()) return loss.status();
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
    FillHotRows(*step);
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
  if (hot_ != nullptr && start_step_ < total_steps_) {
    RETURN_IF_ERROR(RefreshHotRows(start_step_, result));
  }
  std::unique_ptr<PreparedStep> current, pushing;
  // The tier's update of a step reads its gradients: done before the
  // steps go, whichever way Run returns.
  absl::Cleanup await_hot_apply = [this] { AwaitHotApply(); };
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
    FillHotRows(*current);
    metrics_.pull_wait_seconds =
        metrics_.pull_wait_seconds +
        absl::ToDoubleSeconds(absl::Now() - pull_start);
    // The next batch is read, deduplicated and its Pulls started before
    // this step computes: on a helper thread while it computes with CUDA
    // (the host is otherwise idle during the device's step; the helper
    // touches the reader, the deduplicator and the spare steps, this
    // thread none of them until it has the result), here with the CPU
    // backend (whose step already takes every core the job gives it).
    std::future<absl::StatusOr<std::unique_ptr<PreparedStep>>> preparing;
    if (step + 1 < total_steps_) {
      auto prepare_next =
          [this, step,
           &result]() -> absl::StatusOr<std::unique_ptr<PreparedStep>> {
        const absl::Time read_start = absl::Now();
        ASSIGN_OR_RETURN(std::optional<data::SchemaBatch> batch,
                         reader_->Next());
        if (!batch.has_value()) {
          return absl::InternalError(
              absl::StrCat("the reader ended at step ", step + 1));
        }
        const absl::Time prepare_start = absl::Now();
        result.read_seconds +=
            absl::ToDoubleSeconds(prepare_start - read_start);
        absl::StatusOr<std::unique_ptr<PreparedStep>> prepared =
            Prepare(std::move(*batch), static_cast<uint64_t>(step + 1));
        result.prepare_seconds +=
            absl::ToDoubleSeconds(absl::Now() - prepare_start);
        return prepared;
      };
      if (o_.model.backend == dense::Backend::kCuda) {
        preparing = std::async(std::launch::async, std::move(prepare_next));
      } else {
        std::promise<absl::StatusOr<std::unique_ptr<PreparedStep>>> here;
        here.set_value(prepare_next());
        preparing = here.get_future();
      }
    }
    absl::StatusOr<float> loss = TrainOn(*current);
    std::unique_ptr<PreparedStep> next;
    if (preparing.valid()) {
      const absl::Time wait_start = absl::Now();
      absl::StatusOr<std::unique_ptr<PreparedStep>> prepared = preparing.get();
      result.prepare_wait_seconds +=
          absl::ToDoubleSeconds(absl::Now() - wait_start);
      // (A step that goes cancels its Pulls and waits for its calls.)
      if (!prepared.ok() && loss.ok()) return prepared.status();
      if (prepared.ok()) next = *std::move(prepared);
    }
    if (!loss.ok()) {
      return absl::Status(
          loss.status().code(),
          absl::StrCat("step ", step, ": ", loss.status().message()));
    }
    samples_ += current->batch.size;
    for (const data::SchemaBatch::Bags& bags : current->batch.slots) {
      result.keys += static_cast<int64_t>(bags.keys.size());
    }
    for (const TableBatch& table : current->tables) {
      result.keys_pulled += static_cast<int64_t>(table.pulled);
      result.keys_hot += static_cast<int64_t>(table.hot_slots.size());
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
      RETURN_IF_ERROR(WriteBackHotRows(step + 1, result));
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
    if (HotRowsRefreshDue(step + 1)) {
      RETURN_IF_ERROR(RefreshHotRows(step + 1, result));
      ASSIGN_OR_RETURN(current, Reprepare(std::move(current),
                                          static_cast<uint64_t>(step + 1)));
    }
  }
  if (pushing != nullptr) RETURN_IF_ERROR(AwaitPushes(*pushing));
  // The servers hold the whole table from here on.
  if (o_.job.rank == 0 && total_steps_ > start_step_) {
    RETURN_IF_ERROR(WriteBackHotRows(total_steps_, result));
  }
  if (hot_ != nullptr) {
    for (int t = 0; t < hot_->num_tables(); ++t) {
      result.hot_rows += static_cast<int64_t>(hot_->keys(t).size());
    }
  }
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

absl::Status DlrmWorker::WriteOutputs(const DlrmJobResult& result) {
  if (c_.output_dir().empty()) return absl::OkStatus();
  std::error_code error;
  std::filesystem::create_directories(c_.output_dir(), error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create output_dir ", c_.output_dir(), ": ", error.message()));
  }
  const std::string dir = c_.output_dir();
  RETURN_IF_ERROR(dense::SaveParameters(
      *model_, result.steps, dir + "/dense.params", nullptr, &input_layout_));
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

}  // namespace dlrm_internal

absl::StatusOr<DlrmJobResult> RunDlrmJob(const DlrmJobOptions& options) {
  RETURN_IF_ERROR(ValidateJobMembership(options.job));
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("the DLRM job needs server addresses");
  }
  dlrm_internal::DlrmWorker worker(options);
  return worker.Run();
}

}  // namespace embedps::worker
