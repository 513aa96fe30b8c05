// ps_worker: a training worker.
//   --model=dlrm  the DLRM job over parameter servers (worker/dlrm_job.h):
//                 embeddings on the ps_server shards (--servers), the dense
//                 model replicated and allreduced; configured by a
//                 text-format WorkerConfig (--config).
//   --model=mlp   the purely dense job (worker/dense_job.h): data-parallel
//                 with no parameter server.
// Collectives run over Gloo (CPU) or NCCL (CUDA). Workers meet through the
// Coordination service of a ps_server (--coordinator; for dlrm, shard 0 by
// default) or a directory (--rendezvous_dir).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "dense/collective/file_store.h"
#include "dense/collective/in_memory_store.h"
#include "google/protobuf/text_format.h"
#include "worker/coordination_store.h"
#include "worker/dense_job.h"
#include "worker/dlrm_job.h"

ABSL_FLAG(std::string, model, "dlrm",
          "what to train. dlrm: the DLRM job over parameter servers "
          "(--config, --servers); mlp: a dense MLP on a synthetic teacher "
          "task, data-parallel with gradient allreduce and no parameter "
          "server");
ABSL_FLAG(std::string, config, "",
          "dlrm: a text-format WorkerConfig (worker/worker_config.proto)");
ABSL_FLAG(std::string, servers, "",
          "dlrm: host:port of every ps_server shard, comma-separated, in "
          "shard order");
ABSL_FLAG(std::string, mode, "",
          "dlrm: overrides the config's mode (async, sync, ssp:N)");
ABSL_FLAG(std::string, train_data, "",
          "dlrm: overrides the config's train_files (comma-separated)");
ABSL_FLAG(std::string, test_data, "",
          "dlrm: overrides the config's test_files (comma-separated)");
ABSL_FLAG(std::string, bayes_metrics, "",
          "dlrm: overrides the config's bayes_metrics_file");
ABSL_FLAG(int64_t, max_steps, -1, "dlrm: overrides the config's max_steps");
ABSL_FLAG(int32_t, epochs, 0,
          "dlrm: overrides the config's epochs (passes over the training "
          "files) when > 0");
ABSL_FLAG(int32_t, step_timeout_s, 0,
          "dlrm: overrides the config's step_timeout_s (how long a SYNC/SSP "
          "Pull waits for the other workers) when > 0");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "dlrm: overrides the config's checkpoint_dir (where checkpoints "
          "are written every checkpoint_every_steps and at the end)");
ABSL_FLAG(std::string, restore, "",
          "dlrm: resume from this checkpoint (a ckpt-* directory, or a "
          "directory of checkpoints: the latest complete one); the servers "
          "must be freshly started");
ABSL_FLAG(int32_t, retry_deadline_s, 60,
          "dlrm: how long calls to an unreachable server keep retrying "
          "before the worker fails");
ABSL_FLAG(int32_t, rank, 0, "this worker's rank, in [0, world_size)");
ABSL_FLAG(int32_t, world_size, 1, "number of workers in the job");
ABSL_FLAG(std::string, rendezvous_dir, "",
          "a directory all workers can reach, fresh for each job, where they "
          "meet (one of this or --coordinator is needed when world_size > 1)");
ABSL_FLAG(std::string, coordinator, "",
          "host:port of a ps_server whose Coordination service the workers "
          "meet through (instead of --rendezvous_dir)");
ABSL_FLAG(std::string, job_name, "dense-job",
          "prefix of this job's rendezvous keys");
ABSL_FLAG(std::string, gloo_host, "127.0.0.1",
          "address this worker listens on for its peers' Gloo connections");
ABSL_FLAG(int32_t, timeout_s, 60,
          "seconds before a rendezvous or collective that a peer never "
          "joins fails (instead of hanging)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu (BLAS, Gloo) or cuda (cuBLAS, NCCL)");
ABSL_FLAG(int32_t, cuda_device, 0, "--device=cuda: the device ordinal");
ABSL_FLAG(bool, allow_tf32, false,
          "--device=cuda: allow TF32 tensor-core GEMMs (faster, less exact)");
ABSL_FLAG(int32_t, input_dim, 32, "dense features per sample");
ABSL_FLAG(std::string, hidden, "64,32", "hidden widths of the MLP");
ABSL_FLAG(std::string, teacher_hidden, "16",
          "hidden widths of the synthetic task's teacher MLP");
ABSL_FLAG(double, teacher_scale, 4.0,
          "multiplies the teacher's logits (larger: easier task)");
ABSL_FLAG(uint64_t, data_seed, 1, "seed of the synthetic task");
ABSL_FLAG(uint64_t, seed, 0, "seed of the model's initialization");
ABSL_FLAG(int32_t, batch_size, 0,
          "samples per step on each worker (mlp default 256; dlrm: "
          "overrides the config when > 0)");
ABSL_FLAG(int64_t, steps, 500, "mlp: training steps");
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
ABSL_FLAG(int64_t, log_every, 0,
          "a progress line every N steps (0: dlrm: the config's "
          "log_every_steps; mlp: 100)");
ABSL_FLAG(int64_t, checkpoint_every_steps, -1,
          "dlrm: overrides the config's checkpoint_every_steps");
ABSL_FLAG(int32_t, blas_threads, 1, "threads BLAS may use");
ABSL_FLAG(std::string, output_dir, "",
          "mlp: rank-<r>.dense and rank-<r>.json go here; dlrm: overrides "
          "the config's output_dir (summary.json, history.csv, "
          "dense.params)");
ABSL_FLAG(int32_t, metrics_port, -1,
          "dlrm: serve Prometheus metrics on this port (-1: off, 0: pick "
          "one)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "dlrm: the address the metrics endpoint listens on");
ABSL_FLAG(std::string, metrics_port_file, "",
          "dlrm: write the metrics port here once it listens");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");

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

// The rendezvous store: --coordinator, --rendezvous_dir, `fallback_
// coordinator` (dlrm: shard 0), or in-process for a single rank.
absl::StatusOr<std::unique_ptr<dense::Store>> MakeStore(
    int world_size, const std::string& fallback_coordinator) {
  const std::string dir = absl::GetFlag(FLAGS_rendezvous_dir);
  std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  if (!dir.empty() && !coordinator.empty()) {
    return absl::InvalidArgumentError(
        "give one of --rendezvous_dir and --coordinator, not both");
  }
  if (!dir.empty()) return dense::CreateFileStore(dir);
  if (world_size == 1) {
    // One rank meets only itself.
    return std::unique_ptr<dense::Store>(new dense::InMemoryStore());
  }
  if (coordinator.empty()) coordinator = fallback_coordinator;
  if (coordinator.empty()) {
    return absl::InvalidArgumentError(
        "--world_size > 1 needs --rendezvous_dir or --coordinator");
  }
  return std::unique_ptr<dense::Store>(new CoordinationStore(coordinator));
}

std::vector<std::string> SplitList(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

// A non-empty comma-separated flag replaces the config's file list.
void ReplaceFiles(const std::string& flag,
                  google::protobuf::RepeatedPtrField<std::string>* files) {
  if (flag.empty()) return;
  files->Clear();
  for (const std::string& f : SplitList(flag)) *files->Add() = f;
}

absl::Status RunDlrm() {
  DlrmJobOptions options;
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) {
    return absl::InvalidArgumentError("--model=dlrm needs --config=FILE");
  }
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read --config ", path));
  }
  std::stringstream text;
  text << file.rdbuf();
  if (!google::protobuf::TextFormat::ParseFromString(text.str(),
                                                     &options.config)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path,
                     " is not a text-format WorkerConfig (the parse "
                     "error is logged above)"));
  }
  WorkerConfig& config = options.config;
  if (!absl::GetFlag(FLAGS_mode).empty()) {
    config.set_mode(absl::GetFlag(FLAGS_mode));
  }
  ReplaceFiles(absl::GetFlag(FLAGS_train_data), config.mutable_train_files());
  ReplaceFiles(absl::GetFlag(FLAGS_test_data), config.mutable_test_files());
  if (!absl::GetFlag(FLAGS_bayes_metrics).empty()) {
    config.set_bayes_metrics_file(absl::GetFlag(FLAGS_bayes_metrics));
  }
  if (absl::GetFlag(FLAGS_max_steps) >= 0) {
    config.set_max_steps(absl::GetFlag(FLAGS_max_steps));
  }
  if (absl::GetFlag(FLAGS_batch_size) > 0) {
    config.set_batch_size(absl::GetFlag(FLAGS_batch_size));
  }
  if (absl::GetFlag(FLAGS_step_timeout_s) > 0) {
    config.set_step_timeout_s(absl::GetFlag(FLAGS_step_timeout_s));
  }
  if (absl::GetFlag(FLAGS_epochs) > 0) {
    config.set_epochs(absl::GetFlag(FLAGS_epochs));
  }
  if (absl::GetFlag(FLAGS_checkpoint_every_steps) >= 0) {
    config.set_checkpoint_every_steps(
        absl::GetFlag(FLAGS_checkpoint_every_steps));
  }
  if (absl::GetFlag(FLAGS_log_every) > 0) {
    config.set_log_every_steps(absl::GetFlag(FLAGS_log_every));
  }
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    config.set_checkpoint_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  }
  options.restore = absl::GetFlag(FLAGS_restore);
  if (!absl::GetFlag(FLAGS_output_dir).empty()) {
    config.set_output_dir(absl::GetFlag(FLAGS_output_dir));
  }
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.servers = SplitList(absl::GetFlag(FLAGS_servers));
  if (options.servers.empty()) {
    return absl::InvalidArgumentError(
        "--model=dlrm needs --servers=host:port,... (every shard, in order)");
  }
  options.job_name = absl::GetFlag(FLAGS_job_name);
  options.gloo_host = absl::GetFlag(FLAGS_gloo_host);
  options.collective_timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  options.retry_deadline = absl::Seconds(absl::GetFlag(FLAGS_retry_deadline_s));
  absl::StatusOr<dense::Backend> backend =
      dense::ParseBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return backend.status();
  options.model.backend = *backend;
  options.model.device = absl::GetFlag(FLAGS_cuda_device);
  options.model.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  options.progress_in_place = isatty(STDERR_FILENO) != 0;
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  if (absl::Status s = ValidateWorkerConfig(config); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--config ", path, ": ", s.message()));
  }
  absl::StatusOr<std::unique_ptr<dense::Store>> store =
      MakeStore(options.world_size, options.servers[0]);
  if (!store.ok()) return store.status();
  options.store = store->get();
  absl::StatusOr<DlrmJobResult> result = RunDlrmJob(options);
  if (!result.ok()) return result.status();
  if (options.rank == 0) {
    std::printf("%s\n", DlrmJobResultJson(options, *result).c_str());
  }
  return absl::OkStatus();
}

absl::Status Run() {
  if (absl::GetFlag(FLAGS_model) == "dlrm") return RunDlrm();
  if (absl::GetFlag(FLAGS_model) != "mlp") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: unknown '", absl::GetFlag(FLAGS_model), "' (dlrm or mlp)"));
  }
  DenseJobOptions options;
  options.rank = absl::GetFlag(FLAGS_rank);
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.job_name = absl::GetFlag(FLAGS_job_name);
  options.gloo_host = absl::GetFlag(FLAGS_gloo_host);
  options.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  absl::StatusOr<dense::Backend> backend =
      dense::ParseBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return backend.status();
  options.model.backend = *backend;
  options.model.device = absl::GetFlag(FLAGS_cuda_device);
  options.model.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
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
  if (absl::GetFlag(FLAGS_batch_size) > 0) {
    options.batch_size = absl::GetFlag(FLAGS_batch_size);
  }
  options.steps = absl::GetFlag(FLAGS_steps);
  absl::StatusOr<dense::DenseOptimizerSpec> optimizer = OptimizerFromFlags();
  if (!optimizer.ok()) return optimizer.status();
  options.optimizer = *optimizer;
  options.eval_samples = absl::GetFlag(FLAGS_eval_samples);
  options.eval_every = absl::GetFlag(FLAGS_eval_every);
  options.log_every =
      absl::GetFlag(FLAGS_log_every) > 0 ? absl::GetFlag(FLAGS_log_every) : 100;
  options.blas_threads = absl::GetFlag(FLAGS_blas_threads);
  options.output_dir = absl::GetFlag(FLAGS_output_dir);

  absl::StatusOr<std::unique_ptr<dense::Store>> store =
      MakeStore(options.world_size, "");
  if (!store.ok()) return store.status();
  options.store = store->get();

  absl::StatusOr<DenseJobResult> result = RunDenseJob(options);
  if (!result.ok()) return result.status();
  std::printf("%s\n", DenseJobResultJson(options, *result).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace embedps::worker

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "ps_worker: trains a model. --model=mlp runs a data-parallel dense job "
      "(see docs/operations.md).");
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();
  if (absl::Status s = embedps::SetLogLevel(absl::GetFlag(FLAGS_log_level));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = embedps::worker::Run(); !s.ok()) {
    embedps::Logger("ps_worker")->error("{}", s.ToString());
    return 1;
  }
  return 0;
}
