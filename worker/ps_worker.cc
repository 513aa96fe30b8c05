// ps_worker: one worker of a DLRM training job over embedps parameter
// servers (worker/dlrm_job.h). The job is its text-format config::WorkerConfig
// (--config, config/worker_config.proto); the flags here override parts of
// it, and the shared job flags (worker/job_flags.h) place this worker in
// its job.
//
//   ps_worker --config=dlrm.txtpb --servers=h1:50051,h2:50051 --rank=0
//       --world_size=2
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"
#include "common/program_usage.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "security/flags.h"
#include "worker/dlrm_job.h"
#include "worker/job_flags.h"

ABSL_FLAG(std::string, config, "",
          "a text-format WorkerConfig (config/worker_config.proto)");
ABSL_FLAG(std::string, servers, "",
          "host:port of every ps_server shard, comma-separated, in "
          "shard order");
ABSL_FLAG(std::string, cluster_id, "",
          "the cluster the --servers must belong to (their ps_server "
          "--cluster_id); the job refuses servers of another one, and "
          "servers that are not shards 0..n-1 in the order given (empty: any "
          "one cluster)");
ABSL_FLAG(std::string, mode, "",
          "overrides the config's mode (async, sync, ssp:N)");
ABSL_FLAG(std::string, train_data, "",
          "overrides the config's train_files (comma-separated)");
ABSL_FLAG(std::string, test_data, "",
          "overrides the config's test_files (comma-separated)");
ABSL_FLAG(std::string, bayes_metrics, "",
          "overrides the config's bayes_metrics_file");
ABSL_FLAG(int64_t, max_steps, -1, "overrides the config's max_steps");
ABSL_FLAG(int32_t, epochs, 0,
          "overrides the config's epochs (passes over the training "
          "files) when > 0");
ABSL_FLAG(int32_t, batch_size, 0,
          "overrides the config's batch_size (samples per step on each "
          "worker) when > 0");
ABSL_FLAG(int32_t, step_timeout_s, 0,
          "overrides the config's step_timeout_s (how long a SYNC/SSP "
          "Pull waits for the other workers) when > 0");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "overrides the config's checkpoint_dir (where checkpoints "
          "are written every checkpoint_every_steps and at the end)");
ABSL_FLAG(int64_t, checkpoint_every_steps, -1,
          "overrides the config's checkpoint_every_steps");
ABSL_FLAG(int64_t, log_every, 0,
          "overrides the config's log_every_steps (a progress line every N "
          "steps) when > 0");
ABSL_FLAG(std::string, restore, "",
          "resume from this checkpoint (a ckpt-* directory, or a "
          "directory of checkpoints: the latest complete one); the servers "
          "must be freshly started");
ABSL_FLAG(int32_t, retry_deadline_s, 60,
          "how long calls to an unreachable server keep retrying "
          "before the worker fails");
ABSL_FLAG(int32_t, blas_threads, 0,
          "overrides the config's blas_threads: the threads of the CPU "
          "model and of the host's batch stages");
ABSL_FLAG(int64_t, hot_rows, -1,
          "overrides the config's hot_rows_per_table when >= 0: each "
          "worker trains the N most pulled rows of every table itself "
          "(0: no hot-row tier)");
ABSL_FLAG(int64_t, hot_rows_refresh_steps, 0,
          "overrides the config's hot_rows_refresh_steps when > 0");
ABSL_FLAG(int64_t, hot_rows_warmup_steps, 0,
          "overrides the config's hot_rows_warmup_steps when > 0");
ABSL_FLAG(bool, stages_on_host, false,
          "gather the bags' rows and sum their gradients per unique row on "
          "the host even with --device=cuda (which runs them on the device): "
          "for comparisons");
ABSL_FLAG(int32_t, metrics_port, -1,
          "serve Prometheus metrics on this port (-1: off, 0: pick "
          "one)");
ABSL_FLAG(std::string, metrics_host, "127.0.0.1",
          "the address the metrics endpoint listens on");
ABSL_FLAG(std::string, metrics_port_file, "",
          "write the metrics port here once it listens");

namespace embedps::worker {
namespace {

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

// The job's options from --config and the flags; `job` keeps the store.
absl::Status Configure(DlrmJobOptions& options, JobFromFlags& job) {
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "--config=FILE is required: a text-format config::WorkerConfig "
        "(deploy/local/dlrm_small.txtpb is an example)");
  }
  RETURN_IF_ERROR(ReadTextProtoFile(path, absl::StrCat("--config ", path),
                                    &options.config));
  config::WorkerConfig& config = options.config;
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
  if (absl::GetFlag(FLAGS_blas_threads) > 0) {
    config.set_blas_threads(absl::GetFlag(FLAGS_blas_threads));
  }
  if (absl::GetFlag(FLAGS_hot_rows) >= 0) {
    config.set_hot_rows_per_table(absl::GetFlag(FLAGS_hot_rows));
  }
  if (absl::GetFlag(FLAGS_hot_rows_refresh_steps) > 0) {
    config.set_hot_rows_refresh_steps(
        absl::GetFlag(FLAGS_hot_rows_refresh_steps));
  }
  if (absl::GetFlag(FLAGS_hot_rows_warmup_steps) > 0) {
    config.set_hot_rows_warmup_steps(
        absl::GetFlag(FLAGS_hot_rows_warmup_steps));
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
  options.servers = SplitList(absl::GetFlag(FLAGS_servers));
  options.cluster_id = absl::GetFlag(FLAGS_cluster_id);
  if (options.servers.empty()) {
    return absl::InvalidArgumentError(
        "--servers=host:port,... is required (every shard, in order)");
  }
  ASSIGN_OR_RETURN(job, ReadJobFlags("dlrm", options.servers[0]));
  options.job = job.job;
  options.retry_deadline = absl::Seconds(absl::GetFlag(FLAGS_retry_deadline_s));
  ASSIGN_OR_RETURN(options.model, ReadModelFlags());
  options.stages_on_host = absl::GetFlag(FLAGS_stages_on_host);
  options.progress_in_place = isatty(STDERR_FILENO) != 0;
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.security = security::ChannelSecurityFromFlags();
  options.metrics_port_file = absl::GetFlag(FLAGS_metrics_port_file);
  if (absl::Status s = config::ValidateWorkerConfig(config); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--config ", path, ": ", s.message()));
  }
  return absl::OkStatus();
}

// 2: the command line or the config cannot work; 1: the job failed.
int Run() {
  const auto log = Logger("ps_worker");
  DlrmJobOptions options;
  JobFromFlags job;
  if (absl::Status s = Configure(options, job); !s.ok()) {
    log->error("{}", s.ToString());
    return 2;
  }
  absl::StatusOr<DlrmJobResult> result = RunDlrmJob(options);
  if (!result.ok()) {
    log->error("{}", result.status().ToString());
    return 1;
  }
  if (options.job.rank == 0) {
    std::printf("%s\n", DlrmJobResultJson(options, *result).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace embedps::worker

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "one worker of a DLRM training job over ps_server shards.\n"
      "  ps_worker --config=dlrm.txtpb --servers=HOST:PORT,... "
      "[--rank=R --world_size=N]\n"
      "The config (config/worker_config.proto) describes the job; the flags "
      "override parts of it (docs/operations.md).",
      {"worker/ps_worker.cc", embedps::worker::kJobFlagsFile,
       embedps::security::kClientFlagsFile});
  if (const int code = embedps::worker::ParseJobCommandLine(argc, argv);
      code >= 0) {
    return code;
  }
  return embedps::worker::Run();
}
