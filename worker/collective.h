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

struct CollectiveOptions {
  int rank = 0;
  int world_size = 1;
  // kCpu: Gloo; kCuda: NCCL on `device`.
  dense::Backend backend = dense::Backend::kCpu;
  int device = 0;
  // Gloo's listening address. Default: loopback.
  std::string gloo_host = "127.0.0.1";
  // Rendezvous and collectives fail after this. Default: 60 s.
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of the job's keys in the store. Required.
  std::string job_name;
};

// `store` must outlive the communicator. Errors name the rank.
absl::StatusOr<std::unique_ptr<dense::Communicator>> ConnectCollective(
    const CollectiveOptions& options, dense::Store* store);

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_COLLECTIVE_H_
