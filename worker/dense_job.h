// The purely dense training job: an MLP trained data-parallel across
// `world_size` ranks (processes) with an AllReduce of the gradients and no
// parameter server (`ps_worker --model=mlp`). Data come from a synthetic
// teacher task (dense/synthetic_task.h): step t's global batch is samples
// [t·W·B, (t+1)·W·B), rank r taking the r-th slice of B, so that W ranks ×
// B see exactly what one rank × W·B sees.
//
// Thread safety: RunDenseJob is one rank; run several in one process only
// with separate stores/ports.
#ifndef EMBEDPS_WORKER_DENSE_JOB_H_
#define EMBEDPS_WORKER_DENSE_JOB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dense/collective/store.h"
#include "dense/dense_optimizer.h"
#include "dense/model.h"
#include "dense/synthetic_task.h"
#include "worker/collective.h"

namespace embedps::worker {

struct DenseJobOptions {
  // Rank, world, store, name, collective timeout. Required: store, name.
  JobMembership job;
  // kCpu trains over BLAS and reduces with Gloo; kCuda over cuBLAS and
  // NCCL on options.model.device.
  dense::ModelOptions model;
  // The data and the model's hidden widths. Defaults: see the structs.
  dense::SyntheticTaskSpec task;
  std::vector<int> hidden = {64, 32};
  uint64_t seed = 0;
  // Per-rank batch and the number of steps. Defaults: 256, 500.
  int batch_size = 256;
  int64_t steps = 500;
  dense::DenseOptimizerSpec optimizer;
  // Evaluation on a held-out slice of the task (every rank evaluates the
  // same samples). Defaults: 8192 samples, at the start and the end only.
  int eval_samples = 8192;
  int64_t eval_every = 0;
  // A progress line every this many steps. Default: 100.
  int64_t log_every = 100;
  // Threads BLAS may use. Default: 1.
  int blas_threads = 1;
  // When set: rank-<r>.dense (final parameters) and rank-<r>.json (the
  // result) are written here.
  std::string output_dir;
};

struct DenseJobResult {
  int64_t steps = 0;
  double seconds = 0;
  // Samples of all ranks per second of this rank's training loop.
  double samples_per_second = 0;
  // Mean training loss of this rank's last 10% of steps.
  double final_train_loss = 0;
  double initial_eval_loss = 0;
  double final_eval_loss = 0;
  // The eval loss of the teacher's own probabilities: the floor.
  double bayes_eval_loss = 0;
};

// Runs the job on this rank. INVALID_ARGUMENT for bad options; a
// collective's or the model's error (naming the rank) otherwise.
// INVALID_ARGUMENT naming the option that cannot work.
absl::Status ValidateDenseJobOptions(const DenseJobOptions& options);

absl::StatusOr<DenseJobResult> RunDenseJob(const DenseJobOptions& options);

// The result as one JSON object.
std::string DenseJobResultJson(const DenseJobOptions& options,
                               const DenseJobResult& result);

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_DENSE_JOB_H_
