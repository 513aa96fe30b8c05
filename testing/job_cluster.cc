#include "testing/job_cluster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "testing/child_process.h"

namespace embedps::testing {

std::string JobShards::servers_flag() const {
  return "--servers=" + absl::StrJoin(addresses, ",");
}

absl::StatusOr<JobShards> StartJobShards(
    int servers, int workers, const std::vector<std::string>& flags) {
  JobShards shards;
  for (int s = 0; s < servers; ++s) {
    std::vector<std::string> args = {absl::StrCat("--shard_index=", s),
                                     absl::StrCat("--num_shards=", servers),
                                     absl::StrCat("--num_workers=", workers)};
    args.insert(args.end(), flags.begin(), flags.end());
    ASSIGN_OR_RETURN(std::unique_ptr<ServerProcess> shard,
                     ServerProcess::Start("server/ps_server", args));
    shards.addresses.push_back(shard->address());
    shards.processes.push_back(std::move(shard));
  }
  return shards;
}

absl::StatusOr<std::vector<int>> RunWorkers(
    int workers, const std::function<std::vector<std::string>(int)>& args,
    const std::string& rank0_log, absl::Duration timeout) {
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < workers; ++r) {
    ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> process,
                     ChildProcess::Spawn("worker/ps_worker", args(r), "",
                                         r == 0 ? rank0_log : "/dev/null"));
    ranks.push_back(std::move(process));
  }
  std::vector<int> codes;
  for (std::unique_ptr<ChildProcess>& rank : ranks) {
    ASSIGN_OR_RETURN(const int code, rank->WaitFor(timeout));
    codes.push_back(code);
  }
  return codes;
}

}  // namespace embedps::testing
