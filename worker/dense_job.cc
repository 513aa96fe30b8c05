#include "worker/dense_job.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "dense/blas.h"
#include "dense/data_parallel.h"
#include "nlohmann/json.hpp"
#include "worker/collective.h"

namespace embedps::worker {
namespace {

// Held-out samples start far beyond any training step's.
constexpr int64_t kEvalFirstSample = int64_t{1} << 50;

}  // namespace

absl::Status ValidateDenseJobOptions(const DenseJobOptions& o) {
  RETURN_IF_ERROR(ValidateJobMembership(o.job));
  if (o.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch_size must be > 0, got ", o.batch_size));
  }
  if (o.steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps must be >= 0, got ", o.steps));
  }
  if (o.eval_samples <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--eval_samples must be > 0, got ", o.eval_samples));
  }
  return absl::OkStatus();
}

namespace {

// Mean loss of the model on the held-out samples; also the Bayes loss
// (the teacher's) when `bayes` is not null.
absl::StatusOr<double> Evaluate(dense::Model& model, dense::SyntheticTask& task,
                                int samples, double* bayes) {
  constexpr int kChunk = 4096;
  const int dim = task.input_dim();
  std::vector<float> x, y, logits, true_logits;
  double loss_sum = 0, bayes_sum = 0;
  for (int first = 0; first < samples; first += kChunk) {
    const int n = std::min(kChunk, samples - first);
    x.resize(static_cast<size_t>(n) * dim);
    y.resize(n);
    logits.resize(n);
    true_logits.resize(n);
    task.Fill(kEvalFirstSample + first, n, absl::MakeSpan(x), absl::MakeSpan(y),
              absl::MakeSpan(true_logits));
    dense::Batch<float> batch;
    batch.size = n;
    batch.dense = x;
    RETURN_IF_ERROR(model.Predict(batch, absl::MakeSpan(logits)));
    loss_sum += dense::MeanLogLoss(logits, y) * n;
    bayes_sum += dense::MeanLogLoss(true_logits, y) * n;
  }
  if (bayes != nullptr) *bayes = bayes_sum / samples;
  return loss_sum / samples;
}

}  // namespace

absl::StatusOr<DenseJobResult> RunDenseJob(const DenseJobOptions& o) {
  RETURN_IF_ERROR(ValidateDenseJobOptions(o));
  auto log = Logger("dense_job");
  dense::SetDenseThreads(o.blas_threads);
  ASSIGN_OR_RETURN(std::unique_ptr<dense::SyntheticTask> task,
                   dense::SyntheticTask::Create(o.task));
  ASSIGN_OR_RETURN(
      std::unique_ptr<dense::Model> model,
      dense::CreateModel(
          dense::MlpModelSpec(o.task.input_dim, o.hidden, o.seed), o.model));
  ASSIGN_OR_RETURN(std::unique_ptr<dense::DenseOptimizer> optimizer,
                   model->NewOptimizer(o.optimizer));
  log->info("rank {}/{}: connecting ({} backend, {} parameters)", o.job.rank,
            o.job.world_size, dense::BackendName(o.model.backend),
            model->num_parameters());
  ASSIGN_OR_RETURN(std::unique_ptr<dense::Communicator> communicator,
                   ConnectCollective(o.job, o.model));
  ASSIGN_OR_RETURN(std::unique_ptr<dense::DataParallelTrainer> trainer,
                   dense::DataParallelTrainer::Create(
                       model.get(), communicator.get(), optimizer.get()));

  DenseJobResult result;
  ASSIGN_OR_RETURN(
      result.initial_eval_loss,
      Evaluate(*model, *task, o.eval_samples, &result.bayes_eval_loss));
  log->info("rank {}: eval loss {:.5f} at step 0 (Bayes-optimal {:.5f})",
            o.job.rank, result.initial_eval_loss, result.bayes_eval_loss);

  const int dim = task->input_dim();
  std::vector<float> x(static_cast<size_t>(o.batch_size) * dim),
      y(o.batch_size);
  const int64_t tail_from = o.steps - std::max<int64_t>(1, o.steps / 10);
  double tail_sum = 0;
  int64_t tail_count = 0;
  const absl::Time start = absl::Now();
  for (int64_t step = 0; step < o.steps; ++step) {
    const int64_t first = step * o.job.world_size * o.batch_size +
                          int64_t{o.job.rank} * o.batch_size;
    task->Fill(first, o.batch_size, absl::MakeSpan(x), absl::MakeSpan(y));
    dense::Batch<float> batch;
    batch.size = o.batch_size;
    batch.dense = x;
    batch.labels = y;
    ASSIGN_OR_RETURN(float loss, trainer->Step(batch, {}));
    if (step >= tail_from) {
      tail_sum += loss;
      ++tail_count;
    }
    if (o.log_every > 0 && (step + 1) % o.log_every == 0) {
      const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
      log->info("rank {}: step {}/{} loss {:.5f} {:.0f} samples/s", o.job.rank,
                step + 1, o.steps, loss,
                (step + 1) * o.job.world_size * o.batch_size / seconds);
    }
    if (o.eval_every > 0 && (step + 1) % o.eval_every == 0 &&
        step + 1 < o.steps) {
      ASSIGN_OR_RETURN(double eval,
                       Evaluate(*model, *task, o.eval_samples, nullptr));
      log->info("rank {}: eval loss {:.5f} at step {}", o.job.rank, eval,
                step + 1);
    }
  }
  result.steps = o.steps;
  result.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.samples_per_second =
      result.seconds > 0
          ? o.steps * o.job.world_size * o.batch_size / result.seconds
          : 0;
  result.final_train_loss = tail_count > 0 ? tail_sum / tail_count : 0;
  ASSIGN_OR_RETURN(result.final_eval_loss,
                   Evaluate(*model, *task, o.eval_samples, nullptr));
  log->info("rank {}: eval loss {:.5f} at step {} (Bayes-optimal {:.5f})",
            o.job.rank, result.final_eval_loss, o.steps,
            result.bayes_eval_loss);

  if (!o.output_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(o.output_dir, error);
    if (error) {
      return absl::UnavailableError(absl::StrCat(
          "cannot create --output_dir ", o.output_dir, ": ", error.message()));
    }
    const std::string base = absl::StrCat(o.output_dir, "/rank-", o.job.rank);
    RETURN_IF_ERROR(dense::SaveParameters(*model, o.steps, base + ".dense"));
    std::ofstream json(base + ".json", std::ios::trunc);
    json << DenseJobResultJson(o, result) << "\n";
    if (!json.flush()) {
      return absl::UnavailableError(
          absl::StrCat("cannot write ", base, ".json"));
    }
  }
  return result;
}

std::string DenseJobResultJson(const DenseJobOptions& o,
                               const DenseJobResult& r) {
  const nlohmann::ordered_json json = {
      {"model", "mlp"},
      {"device", dense::BackendName(o.model.backend)},
      {"rank", o.job.rank},
      {"world_size", o.job.world_size},
      {"batch_size", o.batch_size},
      {"hidden", o.hidden},
      {"steps", r.steps},
      {"seconds", r.seconds},
      {"samples_per_second", r.samples_per_second},
      {"final_train_loss", r.final_train_loss},
      {"initial_eval_loss", r.initial_eval_loss},
      {"final_eval_loss", r.final_eval_loss},
      {"bayes_eval_loss", r.bayes_eval_loss},
  };
  return json.dump();
}

}  // namespace embedps::worker
