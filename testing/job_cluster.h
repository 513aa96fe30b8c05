// A DLRM job on a real local cluster, for tests: fresh ps_server shards
// and ps_worker processes that run to their end.
#ifndef EMBEDPS_TESTING_JOB_CLUSTER_H_
#define EMBEDPS_TESTING_JOB_CLUSTER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "testing/server_process.h"

namespace embedps::testing {

struct JobShards {
  std::vector<std::unique_ptr<ServerProcess>> processes;
  std::vector<std::string> addresses;  // in shard order
  std::string servers_flag() const;    // "--servers=a,b,..."
};

// `servers` fresh shards of server/ps_server for a job of `workers`
// workers, each with `flags` besides its shard flags.
absl::StatusOr<JobShards> StartJobShards(
    int servers, int workers, const std::vector<std::string>& flags = {});

// Runs `workers` worker/ps_worker processes, rank r with args(r), rank 0's
// stderr to `rank0_log` (the others' to /dev/null), and waits up to
// `timeout` for each. Returns every rank's exit code.
absl::StatusOr<std::vector<int>> RunWorkers(
    int workers, const std::function<std::vector<std::string>(int)>& args,
    const std::string& rank0_log, absl::Duration timeout = absl::Seconds(300));

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_JOB_CLUSTER_H_
