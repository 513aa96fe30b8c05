#include "worker/collective.h"

#include "absl/strings/str_cat.h"
#include "dense/collective/gloo_communicator.h"
#include "dense/collective/nccl_communicator.h"

namespace embedps::worker {

absl::Status ValidateJobMembership(const JobMembership& job) {
  if (job.world_size < 1 || job.rank < 0 || job.rank >= job.world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", job.rank, " must be in [0, world_size ", job.world_size, ")"));
  }
  if (job.store == nullptr) {
    return absl::InvalidArgumentError("the job needs a rendezvous store");
  }
  if (job.job_name.empty()) {
    return absl::InvalidArgumentError("the job needs a name");
  }
  if (job.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the collective timeout must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<dense::Communicator>> ConnectCollective(
    const JobMembership& job, const dense::ModelOptions& model) {
  if (model.backend == dense::Backend::kCuda) {
    dense::NcclOptions nccl;
    nccl.rank = job.rank;
    nccl.world_size = job.world_size;
    nccl.device = model.device;
    nccl.timeout = job.timeout;
    nccl.store_prefix = job.job_name + "/nccl";
    return dense::CreateNcclCommunicator(nccl, job.store);
  }
  dense::GlooOptions gloo;
  gloo.rank = job.rank;
  gloo.world_size = job.world_size;
  gloo.hostname = job.gloo_host;
  gloo.timeout = job.timeout;
  gloo.store_prefix = job.job_name + "/gloo";
  return dense::CreateGlooCommunicator(gloo, job.store);
}

}  // namespace embedps::worker
