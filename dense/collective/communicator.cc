#include "dense/collective/communicator.h"

#include "absl/strings/str_cat.h"

namespace embedps::dense {

absl::Status CheckRank(int rank, int world_size) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not in [0, world_size=", world_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcastRoot(int root, int world_size) {
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Broadcast root ", root, " is not a rank of ", world_size));
  }
  return absl::OkStatus();
}

absl::Status CheckAllGatherSizes(size_t input, size_t output, int world_size) {
  if (output != input * world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllGather of ", input, " floats on ", world_size,
        " ranks needs an output of ", input * world_size, ", got ", output));
  }
  return absl::OkStatus();
}

}  // namespace embedps::dense
