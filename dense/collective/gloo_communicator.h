// A Communicator over Gloo's TCP transport, for CPU buffers.
#ifndef EMBEDPS_DENSE_COLLECTIVE_GLOO_COMMUNICATOR_H_
#define EMBEDPS_DENSE_COLLECTIVE_GLOO_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "dense/collective/communicator.h"
#include "dense/collective/store.h"

namespace embedps::dense {

struct GlooOptions {
  int rank = 0;
  int world_size = 1;
  // Address this rank listens on for its peers. Default: loopback.
  std::string hostname = "127.0.0.1";
  // Rendezvous and every collective give up after this. Default: 60 s.
  absl::Duration timeout = absl::Seconds(60);
  // Prefix of this job's keys in the store. Default: "gloo".
  std::string store_prefix = "gloo";
};

// Connects to every other rank through `store` (which must outlive the
// communicator). INVALID_ARGUMENT for a bad rank/size; DEADLINE_EXCEEDED or
// UNAVAILABLE, naming this rank, when peers do not arrive in time.
absl::StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(
    const GlooOptions& options, Store* store);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_COLLECTIVE_GLOO_COMMUNICATOR_H_
