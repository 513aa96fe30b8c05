// The DLRM training job over parameter servers (`ps_worker`):
// one worker of a data-parallel job whose embedding tables live on the
// ps_server shards and whose dense model is replicated and allreduced.
//
// One step t:
//   read this worker's batch (data::CriteoReader, parsed on its own thread;
//     with CUDA, batch t+1 is taken and prepared on a helper thread while
//     t computes)
//   → per table, the batch's unique keys (worker/key_dedup, over threads)
//     → Pull into the model's host memory (issued while step t−1
//     computes: the next batch's rows arrive during the current compute,
//     within what the mode allows — SYNC Pulls wait on the server until
//     step t−1 is applied everywhere)
//   → Model::TrainStepOnUniqueRows: the bags pooled from the unique rows,
//     dense forward/backward, row gradients summed per unique key (on the
//     device for CUDA: only unique rows go up and their gradients down)
//   → Push (SYNC: scaled by
//     1/workers, so that the server's sum is the gradient of the mean loss
//     over the global batch)
//   → AllReduce(mean) of the dense gradients → dense optimizer.
// Rank 0 evaluates on the test files (AUC, log loss) every
// eval_every_steps and at the end, and writes the outputs.
//
// Thread safety: RunDlrmJob is one worker.
#ifndef EMBEDPS_WORKER_DLRM_JOB_H_
#define EMBEDPS_WORKER_DLRM_JOB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "config/dlrm_config.h"
#include "config/worker_config.pb.h"
#include "dense/collective/store.h"
#include "dense/model.h"
#include "security/credentials.h"
#include "worker/collective.h"

namespace embedps::worker {

struct DlrmJobOptions {
  config::WorkerConfig config;
  // Rank, world, store, name, collective timeout. Required: store, name.
  JobMembership job;
  // "host:port" of every ps_server shard, in shard order. Required.
  std::vector<std::string> servers;
  // The cluster they must belong to (ClientOptions::cluster_id); empty:
  // any one.
  std::string cluster_id;
  // How long client calls keep retrying an unreachable server.
  absl::Duration retry_deadline = absl::Seconds(60);
  dense::ModelOptions model;
  // Gather the bags' rows and sum their gradients per unique row on the
  // host (DenseThreads() threads) even where the backend runs them itself
  // (CUDA): for comparisons. Results equal to float rounding.
  bool stages_on_host = false;
  // Rewrite one progress line in place (a terminal) instead of logging.
  bool progress_in_place = false;
  // Serve Prometheus metrics on this port (-1: off; 0: pick one) of
  // metrics_host; with metrics_port_file, write the port there.
  int metrics_port = -1;
  std::string metrics_host = "127.0.0.1";
  std::string metrics_port_file;
  // Resume from a checkpoint: a checkpoint directory, or a directory of
  // checkpoints (the latest complete one). Rank 0 loads the tables into the
  // servers (which must not hold them yet); every rank loads the dense
  // parameters and optimizer state and skips the steps already trained.
  std::string restore;
  // TLS and the token of calls to the servers. Default: plain text.
  security::ChannelSecurity security;
};

struct EvalPoint {
  int64_t step = 0;
  double auc = 0;
  double logloss = 0;
};

struct DlrmJobResult {
  int64_t steps = 0;
  int64_t samples = 0;  // this worker's
  double train_seconds = 0;
  double samples_per_second = 0;  // all workers (this worker's × workers)
  double final_train_loss = 0;    // mean over the last 10% of steps
  std::vector<EvalPoint> evals;   // rank 0
  double bayes_test_auc = 0;      // 0 when unknown
  double bayes_test_logloss = 0;
  int64_t bad_lines = 0;
  double parse_lines_per_second = 0;
  // Where this worker's training time went.
  double pull_wait_seconds = 0;
  double compute_seconds = 0;
  double push_seconds = 0;
  // Waiting for the reader's next batch, and preparing it (deduplicating
  // its keys, starting its Pulls: with CUDA on a helper thread while a
  // step computes); and what of that the training thread waited for.
  double read_seconds = 0;
  double prepare_seconds = 0;
  double prepare_wait_seconds = 0;
  // This worker's keys (ids of all its bags) and the unique keys it
  // pulled, all steps: pulled ÷ samples is the traffic per sample.
  int64_t keys = 0;
  int64_t keys_pulled = 0;
  // Unique keys the hot-row tier served instead of a Pull, all steps; the
  // rows it held at the end (per worker); and the time its refreshes and
  // write-backs took.
  int64_t keys_hot = 0;
  int64_t hot_rows = 0;
  double hot_rows_seconds = 0;
  // The dense model's FLOPs per trained sample (forward and backward, at
  // the keys per bag seen): samples/s × this ÷ a device's peak is its MFU.
  double flops_per_sample = 0;
  // The step this run started from (0, or the restored checkpoint's).
  int64_t start_step = 0;
  std::string restored_from;
  // Checkpoints written (rank 0), and the longest / total time training
  // stood still for them (barriers + table snapshots + dense save).
  int64_t checkpoints = 0;
  double checkpoint_pause_max_seconds = 0;
  double checkpoint_pause_total_seconds = 0;
  std::string last_checkpoint;
  // Publications to serving replicas (rank 0), and the step of the last.
  int64_t publications = 0;
  int64_t last_published_step = -1;
  // Rank 0, at the end: rows the job's tables hold, all shards, and rows
  // the shards evicted (TTL and max_rows) since they started.
  int64_t table_rows = 0;
  int64_t rows_evicted = 0;
};

// Runs this worker to the end of its data (or max_steps).
absl::StatusOr<DlrmJobResult> RunDlrmJob(const DlrmJobOptions& options);

// The summary ps_worker prints and writes (summary.json): one JSON object.
std::string DlrmJobResultJson(const DlrmJobOptions& options,
                              const DlrmJobResult& result);

// The Bayes-optimal test metrics datagen wrote (its meta.json) into
// `result`. They only annotate the results: NOT_FOUND or INVALID_ARGUMENT
// for a file that cannot be read or parsed (the caller logs it), and the
// metrics stay 0.
absl::Status ReadBayesMetrics(const std::string& path, DlrmJobResult& result);

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_DLRM_JOB_H_
