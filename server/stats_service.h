// StatsService: what a process reports of itself, whatever its role. The
// role's part (a training shard's tables and refusals, a serving replica's
// version and tables) comes from the `source` it is made with; the calls
// per method (RpcMetrics) and the process's memory are added here for
// every role. /metrics renders the same answer (RenderPrometheus).
//
// Thread safety: thread-safe, as its source must be.
#ifndef EMBEDPS_SERVER_STATS_SERVICE_H_
#define EMBEDPS_SERVER_STATS_SERVICE_H_

#include <functional>

#include "absl/status/status.h"
#include "proto/stats.grpc.pb.h"
#include "server/memory_guard.h"
#include "server/rpc_metrics.h"

namespace embedps::server {

class StatsServiceImpl final : public proto::StatsService::Service {
 public:
  // The role's part of an answer; an error is the call's answer.
  using Source = std::function<absl::Status(const proto::StatsRequest&,
                                            proto::StatsResponse*)>;

  // `metrics` and `memory` (null: none to report) must outlive the
  // service. `source`: null for a role with nothing of its own to report.
  // `identity`: what Identify answers.
  StatsServiceImpl(RpcMetrics* metrics, MemoryGuard* memory, Source source,
                   proto::ServerIdentity identity);

  grpc::Status Stats(grpc::ServerContext* context,
                     const proto::StatsRequest* request,
                     proto::StatsResponse* response) override;

  grpc::Status Identify(grpc::ServerContext* context,
                        const proto::IdentifyRequest* request,
                        proto::ServerIdentity* response) override;

  // What Stats answers for every table, without counting as a call (for
  // the metrics page). An error of the source leaves its part out.
  proto::StatsResponse Collect();

 private:
  absl::Status Fill(const proto::StatsRequest& request,
                    proto::StatsResponse* response);

  RpcMetrics* const metrics_;
  MemoryGuard* const memory_;
  const Source source_;
  const proto::ServerIdentity identity_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_STATS_SERVICE_H_
