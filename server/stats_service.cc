#include "server/stats_service.h"

#include <utility>

#include "common/connection_cap.h"
#include "wire/grpc_status.h"

namespace embedps::server {

StatsServiceImpl::StatsServiceImpl(RpcMetrics* metrics, MemoryGuard* memory,
                                   Source source,
                                   proto::ServerIdentity identity)
    : metrics_(metrics),
      memory_(memory),
      source_(std::move(source)),
      identity_(std::move(identity)) {}

absl::Status StatsServiceImpl::Fill(const proto::StatsRequest& request,
                                    proto::StatsResponse* response) {
  absl::Status status;
  if (source_) status = source_(request, response);
  if (memory_ != nullptr) {
    response->set_resident_bytes(memory_->resident_bytes());
    response->set_memory_limit_bytes(memory_->limit_bytes());
  }
  response->set_open_descriptors(OpenDescriptors());
  response->set_descriptor_limit(DescriptorLimit());
  response->set_connections_shed(ConnectionsShed());
  metrics_->Fill(response);
  return status;
}

grpc::Status StatsServiceImpl::Stats(grpc::ServerContext*,
                                     const proto::StatsRequest* request,
                                     proto::StatsResponse* response) {
  return metrics_->Measure(RpcMethod::kStats, [&] {
    return wire::ToGrpcStatus(Fill(*request, response));
  });
}

grpc::Status StatsServiceImpl::Identify(grpc::ServerContext*,
                                        const proto::IdentifyRequest*,
                                        proto::ServerIdentity* response) {
  return metrics_->Measure(RpcMethod::kIdentify, [&] {
    *response = identity_;
    return grpc::Status::OK;
  });
}

proto::StatsResponse StatsServiceImpl::Collect() {
  proto::StatsResponse response;
  Fill(proto::StatsRequest(), &response).IgnoreError();
  return response;
}

}  // namespace embedps::server
