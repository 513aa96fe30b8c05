// Communicator: collectives over the ranks of a data-parallel job, in place
// over float buffers. Every rank must call the same collectives in the same
// order with the same sizes.
//
// Errors name the rank and the operation; a rank that never arrives makes
// the others fail with DEADLINE_EXCEEDED or UNAVAILABLE after the backend's
// timeout instead of hanging.
// Thread safety: one thread at a time per Communicator.
#ifndef EMBEDPS_DENSE_COLLECTIVE_COMMUNICATOR_H_
#define EMBEDPS_DENSE_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace embedps::dense {

enum class ReduceOp { kSum, kMean };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // True if the buffers this communicator takes must be CUDA device memory
  // (NCCL); false for host memory (Gloo).
  virtual bool buffers_on_device() const = 0;

  // Every rank's `buffer` becomes the element-wise sum (or mean) over ranks.
  virtual absl::Status AllReduce(absl::Span<float> buffer, ReduceOp op) = 0;

  // Every rank's `buffer` becomes rank `root`'s.
  virtual absl::Status Broadcast(absl::Span<float> buffer, int root) = 0;

  // `output` (world_size × input.size()) becomes the ranks' inputs, in
  // rank order.
  virtual absl::Status AllGather(absl::Span<const float> input,
                                 absl::Span<float> output) = 0;

  // Returns when every rank has called Barrier.
  virtual absl::Status Barrier() = 0;
};

// Argument checks every backend shares; INVALID_ARGUMENT with the numbers.
absl::Status CheckRank(int rank, int world_size);
absl::Status CheckBroadcastRoot(int root, int world_size);
absl::Status CheckAllGatherSizes(size_t input, size_t output, int world_size);

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_COLLECTIVE_COMMUNICATOR_H_
