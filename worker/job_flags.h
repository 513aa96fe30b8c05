// The flags every training command shares (ps_worker, dense_worker): a
// worker's place in its job, how it meets its peers, the device its model
// runs on, logging. Each command defines its own flags beside these and
// lists both in its --help.
//
// Thread safety: read the flags after absl::ParseCommandLine, from one
// thread.
#ifndef EMBEDPS_WORKER_JOB_FLAGS_H_
#define EMBEDPS_WORKER_JOB_FLAGS_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "dense/collective/store.h"
#include "dense/model.h"
#include "worker/collective.h"

ABSL_DECLARE_FLAG(std::string, output_dir);
ABSL_DECLARE_FLAG(std::string, log_level);

namespace embedps::worker {

// The file defining the shared flags, for SetProgramUsage.
inline constexpr char kJobFlagsFile[] = "worker/job_flags.cc";

// A job membership from --rank, --world_size, --job_name (or
// `default_job_name`), --gloo_host and --timeout_s, with the store it
// meets in (owned here): --rendezvous_dir, --coordinator, --control_plane
// (etcd), else
// `fallback_coordinator` (the DLRM job: shard 0), or in-process for a
// single rank. INVALID_ARGUMENT naming the flag that cannot work.
struct JobFromFlags {
  JobMembership job;
  std::unique_ptr<dense::Store> store;
};
absl::StatusOr<JobFromFlags> ReadJobFlags(
    const std::string& default_job_name,
    const std::string& fallback_coordinator = "");

// --device, --cuda_device, --allow_tf32.
absl::StatusOr<dense::ModelOptions> ReadModelFlags();

// Parses the command line and applies --log_level; returns the exit code
// to stop with (2: a bad flag), or -1 to go on.
int ParseJobCommandLine(int argc, char** argv);

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_JOB_FLAGS_H_
