// The Coordination gRPC service over a CoordinationStore.
//
// Thread safety: as the store's. Wait and Barrier hold a gRPC thread while
// they block (at most their timeout).
#ifndef EMBEDPS_SERVER_COORDINATION_SERVICE_H_
#define EMBEDPS_SERVER_COORDINATION_SERVICE_H_

#include "proto/coordination.grpc.pb.h"
#include "server/coordination_store.h"
#include "server/rpc_metrics.h"

namespace embedps::server {

class CoordinationServiceImpl final : public proto::Coordination::Service {
 public:
  // Timeouts of 0 mean this; longer ones are capped at kMaxTimeout.
  static constexpr absl::Duration kDefaultTimeout = absl::Seconds(60);
  static constexpr absl::Duration kMaxTimeout = absl::Hours(1);

  // `metrics` must outlive the service; every call is recorded there.
  explicit CoordinationServiceImpl(RpcMetrics* metrics,
                                   CoordinationLimits limits = {})
      : metrics_(metrics), store_(limits) {}

  grpc::Status Set(grpc::ServerContext* context,
                   const proto::SetRequest* request,
                   proto::SetResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context,
                   const proto::GetRequest* request,
                   proto::GetResponse* response) override;
  grpc::Status Wait(grpc::ServerContext* context,
                    const proto::WaitRequest* request,
                    proto::WaitResponse* response) override;
  grpc::Status Barrier(grpc::ServerContext* context,
                       const proto::BarrierRequest* request,
                       proto::BarrierResponse* response) override;

 private:
  RpcMetrics* const metrics_;
  CoordinationStore store_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_COORDINATION_SERVICE_H_
