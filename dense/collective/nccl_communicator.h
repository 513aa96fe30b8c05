// A Communicator over NCCL, for buffers in GPU memory: the spans passed to
// its collectives hold device pointers of `device`.
//
// Rank 0 creates the NCCL unique id and publishes it in the Store; the
// others wait for it (up to `timeout`). Each collective runs on the
// communicator's own stream and is waited for; one that does not finish
// within `timeout` (a rank is gone) aborts the communicator and returns
// DEADLINE_EXCEEDED instead of hanging.
//
// Builds without CUDA, and machines without a GPU, get FAILED_PRECONDITION
// from the factory, saying which.
#ifndef EMBEDPS_DENSE_COLLECTIVE_NCCL_COMMUNICATOR_H_
#define EMBEDPS_DENSE_COLLECTIVE_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dense/collective/communicator.h"
#include "dense/collective/store.h"

namespace embedps::dense {

struct NcclOptions {
  int rank = 0;
  int world_size = 1;
  // CUDA device ordinal this rank uses. Default: 0.
  int device = 0;
  // Rendezvous and each collective give up after this. Default: 60 s.
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of this job's keys in the store. Default: "nccl".
  std::string store_prefix = "nccl";
};

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclOptions& options, Store* store);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_COLLECTIVE_NCCL_COMMUNICATOR_H_
