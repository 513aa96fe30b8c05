// dense_worker: one rank of a purely dense, data-parallel training job (an
// MLP on a synthetic teacher task, worker/dense_job.h): gradients are
// allreduced with Gloo (CPU) or NCCL (CUDA); no parameter server. The shared
// job flags (worker/job_flags.h) place this rank in its job.
//
//   dense_worker --rank=0 --world_size=2 --rendezvous_dir=/tmp/job
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/program_usage.h"
#include "common/status_macros.h"
#include "security/flags.h"
#include "worker/dense_job.h"
#include "worker/job_flags.h"

ABSL_FLAG(int32_t, input_dim, 32, "dense features per sample");
ABSL_FLAG(std::string, hidden, "64,32", "hidden widths of the MLP");
ABSL_FLAG(std::string, teacher_hidden, "16",
          "hidden widths of the synthetic task's teacher MLP");
ABSL_FLAG(double, teacher_scale, 4.0,
          "multiplies the teacher's logits (larger: easier task)");
ABSL_FLAG(uint64_t, data_seed, 1, "seed of the synthetic task");
ABSL_FLAG(uint64_t, seed, 0, "seed of the model's initialization");
ABSL_FLAG(int32_t, batch_size, 256, "samples per step on each worker");
ABSL_FLAG(int64_t, steps, 500, "training steps");
ABSL_FLAG(std::string, optimizer, "adam", "sgd, adam or adamw");
ABSL_FLAG(double, learning_rate, 1e-3, "peak learning rate");
ABSL_FLAG(double, momentum, 0.0, "sgd momentum in [0, 1)");
ABSL_FLAG(double, weight_decay, 0.01, "adamw decoupled weight decay");
ABSL_FLAG(int64_t, warmup_steps, 0, "linear learning-rate warm-up steps");
ABSL_FLAG(std::string, lr_decay, "constant",
          "constant, linear or cosine decay after the warm-up, reaching "
          "--min_learning_rate at the last step");
ABSL_FLAG(double, min_learning_rate, 0.0, "the decay's final rate");
ABSL_FLAG(int32_t, eval_samples, 8192, "held-out samples per evaluation");
ABSL_FLAG(int64_t, eval_every, 0, "evaluate every N steps (0: start and end)");
ABSL_FLAG(int64_t, log_every, 100, "a progress line every N steps");
ABSL_FLAG(int32_t, blas_threads, 1,
          "threads the dense step runs on (each its share of the batch)");

namespace embedps::worker {
namespace {

absl::StatusOr<std::vector<int>> ParseWidths(const std::string& text,
                                             absl::string_view flag) {
  std::vector<int> widths;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int width = 0;
    if (!absl::SimpleAtoi(part, &width)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": '", part, "' is not an integer (want e.g. 64,32)"));
    }
    widths.push_back(width);
  }
  return widths;
}

absl::StatusOr<dense::DenseOptimizerSpec> OptimizerFromFlags() {
  dense::DenseOptimizerSpec spec;
  const std::string kind = absl::GetFlag(FLAGS_optimizer);
  if (kind == "sgd") {
    spec.kind = dense::DenseOptimizerSpec::Kind::kSgd;
  } else if (kind == "adam") {
    spec.kind = dense::DenseOptimizerSpec::Kind::kAdam;
  } else if (kind == "adamw") {
    spec.kind = dense::DenseOptimizerSpec::Kind::kAdamW;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--optimizer: unknown '", kind, "' (sgd, adam, adamw)"));
  }
  const std::string decay = absl::GetFlag(FLAGS_lr_decay);
  if (decay == "constant") {
    spec.decay = dense::DenseOptimizerSpec::Decay::kConstant;
  } else if (decay == "linear") {
    spec.decay = dense::DenseOptimizerSpec::Decay::kLinear;
  } else if (decay == "cosine") {
    spec.decay = dense::DenseOptimizerSpec::Decay::kCosine;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--lr_decay: unknown '", decay, "' (constant, linear, cosine)"));
  }
  spec.learning_rate = absl::GetFlag(FLAGS_learning_rate);
  spec.momentum = absl::GetFlag(FLAGS_momentum);
  spec.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  spec.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  spec.total_steps = absl::GetFlag(FLAGS_steps);
  spec.min_learning_rate = absl::GetFlag(FLAGS_min_learning_rate);
  return spec;
}

// The job's options from the flags; `job` keeps the store.
absl::Status Configure(DenseJobOptions& options, JobFromFlags& job) {
  ASSIGN_OR_RETURN(job, ReadJobFlags("dense-job"));
  options.job = job.job;
  ASSIGN_OR_RETURN(options.model, ReadModelFlags());
  options.task.input_dim = absl::GetFlag(FLAGS_input_dim);
  absl::StatusOr<std::vector<int>> teacher =
      ParseWidths(absl::GetFlag(FLAGS_teacher_hidden), "teacher_hidden");
  if (!teacher.ok()) return teacher.status();
  options.task.teacher_hidden = *teacher;
  options.task.teacher_scale = absl::GetFlag(FLAGS_teacher_scale);
  options.task.seed = absl::GetFlag(FLAGS_data_seed);
  absl::StatusOr<std::vector<int>> hidden =
      ParseWidths(absl::GetFlag(FLAGS_hidden), "hidden");
  if (!hidden.ok()) return hidden.status();
  options.hidden = *hidden;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.batch_size = absl::GetFlag(FLAGS_batch_size);
  options.steps = absl::GetFlag(FLAGS_steps);
  absl::StatusOr<dense::DenseOptimizerSpec> optimizer = OptimizerFromFlags();
  if (!optimizer.ok()) return optimizer.status();
  options.optimizer = *optimizer;
  options.eval_samples = absl::GetFlag(FLAGS_eval_samples);
  options.eval_every = absl::GetFlag(FLAGS_eval_every);
  options.log_every = absl::GetFlag(FLAGS_log_every);
  options.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  options.output_dir = absl::GetFlag(FLAGS_output_dir);
  return ValidateDenseJobOptions(options);
}

// 2: the command line cannot work; 1: the job failed.
int Run() {
  const auto log = Logger("dense_worker");
  DenseJobOptions options;
  JobFromFlags job;
  if (absl::Status s = Configure(options, job); !s.ok()) {
    log->error("{}", s.ToString());
    return 2;
  }
  absl::StatusOr<DenseJobResult> result = RunDenseJob(options);
  if (!result.ok()) {
    log->error("{}", result.status().ToString());
    return 1;
  }
  std::printf("%s\n", DenseJobResultJson(options, *result).c_str());
  return 0;
}

}  // namespace
}  // namespace embedps::worker

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "one rank of a data-parallel dense job (an MLP on a "
      "synthetic teacher task), no parameter server.\n"
      "  dense_worker [--rank=R --world_size=N --rendezvous_dir=DIR]",
      {"worker/dense_worker.cc", embedps::worker::kJobFlagsFile,
       embedps::security::kClientFlagsFile});
  if (const int code = embedps::worker::ParseJobCommandLine(argc, argv);
      code >= 0) {
    return code;
  }
  return embedps::worker::Run();
}
