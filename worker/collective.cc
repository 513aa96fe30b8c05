#include "worker/collective.h"

#include "dense/collective/gloo_communicator.h"
#include "dense/collective/nccl_communicator.h"

namespace embedps::worker {

absl::StatusOr<std::unique_ptr<dense::Communicator>> ConnectCollective(
    const CollectiveOptions& o, dense::Store* store) {
  if (o.backend == dense::Backend::kCuda) {
    dense::NcclOptions nccl;
    nccl.rank = o.rank;
    nccl.world_size = o.world_size;
    nccl.device = o.device;
    nccl.timeout = o.timeout;
    nccl.store_prefix = o.job_name + "/nccl";
    return dense::CreateNcclCommunicator(nccl, store);
  }
  dense::GlooOptions gloo;
  gloo.rank = o.rank;
  gloo.world_size = o.world_size;
  gloo.hostname = o.gloo_host;
  gloo.timeout = o.timeout;
  gloo.store_prefix = o.job_name + "/gloo";
  return dense::CreateGlooCommunicator(gloo, store);
}

}  // namespace embedps::worker
