#include "server/coordination_service.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/grpc_status.h"

namespace embedps::server {
namespace {

absl::Duration Timeout(uint32_t timeout_ms) {
  if (timeout_ms == 0) return CoordinationServiceImpl::kDefaultTimeout;
  return std::min(absl::Milliseconds(timeout_ms),
                  CoordinationServiceImpl::kMaxTimeout);
}

}  // namespace

grpc::Status CoordinationServiceImpl::Set(grpc::ServerContext*,
                                          const proto::SetRequest* request,
                                          proto::SetResponse*) {
  RpcMetrics::Timer timer(metrics_, RpcMethod::kCoordinationSet);
  const absl::Status status = store_.Set(request->key(), request->value());
  timer.set_ok(status.ok());
  return ToGrpcStatus(status);
}

grpc::Status CoordinationServiceImpl::Get(grpc::ServerContext*,
                                          const proto::GetRequest* request,
                                          proto::GetResponse* response) {
  RpcMetrics::Timer timer(metrics_, RpcMethod::kCoordinationGet);
  absl::StatusOr<std::string> value = store_.Get(request->key());
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(std::move(*value));
  timer.set_ok(true);
  return grpc::Status::OK;
}

grpc::Status CoordinationServiceImpl::Wait(grpc::ServerContext*,
                                           const proto::WaitRequest* request,
                                           proto::WaitResponse* response) {
  RpcMetrics::Timer timer(metrics_, RpcMethod::kCoordinationWait);
  const std::vector<std::string> keys(request->keys().begin(),
                                      request->keys().end());
  absl::StatusOr<std::vector<std::string>> values =
      store_.Wait(keys, Timeout(request->timeout_ms()));
  if (!values.ok()) return ToGrpcStatus(values.status());
  for (std::string& v : *values) response->add_values(std::move(v));
  timer.set_ok(true);
  return grpc::Status::OK;
}

grpc::Status CoordinationServiceImpl::Barrier(
    grpc::ServerContext*, const proto::BarrierRequest* request,
    proto::BarrierResponse* response) {
  RpcMetrics::Timer timer(metrics_, RpcMethod::kCoordinationBarrier);
  absl::StatusOr<uint64_t> generation = store_.Barrier(
      request->name(), request->participants(), Timeout(request->timeout_ms()));
  if (!generation.ok()) return ToGrpcStatus(generation.status());
  response->set_generation(*generation);
  timer.set_ok(true);
  return grpc::Status::OK;
}

}  // namespace embedps::server
