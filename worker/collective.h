// Connects a worker to its peers' collective: Gloo for CPU models, NCCL
// for CUDA models, meeting through a dense::Store.
// Thread safety: thread-safe (no shared state).
#ifndef EMBEDPS_WORKER_COLLECTIVE_H_
#define EMBEDPS_WORKER_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dense/collective/communicator.h"
#include "dense/collective/store.h"
#include "dense/model.h"

namespace embedps::worker {

// A worker's place in its job and how it meets its peers: the part every
// job's options share.
struct JobMembership {
  int rank = 0;
  int world_size = 1;
  // Where ranks meet (borrowed; must outlive the job). Required.
  dense::Store* store = nullptr;
  // Prefix of the job's keys in the store. Required.
  std::string job_name;
  // Gloo's listening address. Default: loopback.
  std::string gloo_host = "127.0.0.1";
  // Rendezvous and collectives fail after this. Default: 60 s.
  absl::Duration timeout = absl::Seconds(60);
};

// INVALID_ARGUMENT naming the field if `job` cannot work.
absl::Status ValidateJobMembership(const JobMembership& job);

// The job's collective for a model on `model`'s backend: Gloo for kCpu,
// NCCL on model.device for kCuda. Errors name the rank.
absl::StatusOr<std::unique_ptr<dense::Communicator>> ConnectCollective(
    const JobMembership& job, const dense::ModelOptions& model);

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_COLLECTIVE_H_
