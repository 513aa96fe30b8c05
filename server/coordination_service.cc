#include "server/coordination_service.h"

#include <algorithm>
#include <string>
#include <vector>

#include "wire/grpc_status.h"

namespace embedps::server {
namespace {

// The request's timeout, cut to the call's deadline: a caller that has
// given up holds no server thread (and a barrier withdraws it) after that.
absl::Duration Timeout(uint32_t timeout_ms,
                       const grpc::ServerContext& context) {
  absl::Duration timeout = timeout_ms == 0
                               ? CoordinationServiceImpl::kDefaultTimeout
                               : std::min(absl::Milliseconds(timeout_ms),
                                          CoordinationServiceImpl::kMaxTimeout);
  const std::chrono::system_clock::time_point deadline = context.deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    timeout = std::min(
        timeout, absl::FromChrono(deadline - std::chrono::system_clock::now()));
  }
  return std::max(timeout, absl::ZeroDuration());
}

}  // namespace

grpc::Status CoordinationServiceImpl::Set(grpc::ServerContext*,
                                          const proto::SetRequest* request,
                                          proto::SetResponse*) {
  return metrics_->Measure(RpcMethod::kCoordinationSet, [&] {
    return wire::ToGrpcStatus(store_.Set(request->key(), request->value()));
  });
}

grpc::Status CoordinationServiceImpl::Get(grpc::ServerContext*,
                                          const proto::GetRequest* request,
                                          proto::GetResponse* response) {
  return metrics_->Measure(RpcMethod::kCoordinationGet, [&] {
    absl::StatusOr<std::string> value = store_.Get(request->key());
    if (!value.ok()) return wire::ToGrpcStatus(value.status());
    response->set_value(std::move(*value));
    return grpc::Status::OK;
  });
}

grpc::Status CoordinationServiceImpl::Wait(grpc::ServerContext* context,
                                           const proto::WaitRequest* request,
                                           proto::WaitResponse* response) {
  return metrics_->Measure(RpcMethod::kCoordinationWait, [&] {
    const std::vector<std::string> keys(request->keys().begin(),
                                        request->keys().end());
    absl::StatusOr<std::vector<std::string>> values =
        store_.Wait(keys, Timeout(request->timeout_ms(), *context));
    if (!values.ok()) return wire::ToGrpcStatus(values.status());
    for (std::string& v : *values) response->add_values(std::move(v));
    return grpc::Status::OK;
  });
}

grpc::Status CoordinationServiceImpl::Barrier(
    grpc::ServerContext* context, const proto::BarrierRequest* request,
    proto::BarrierResponse* response) {
  return metrics_->Measure(RpcMethod::kCoordinationBarrier, [&] {
    absl::StatusOr<uint64_t> generation =
        store_.Barrier(request->name(), request->participants(),
                       Timeout(request->timeout_ms(), *context));
    if (!generation.ok()) return wire::ToGrpcStatus(generation.status());
    response->set_generation(*generation);
    return grpc::Status::OK;
  });
}

}  // namespace embedps::server
