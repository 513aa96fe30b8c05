#include "client/coordination_client.h"

#include <algorithm>

#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "wire/grpc_status.h"

namespace embedps::client {

absl::StatusOr<std::unique_ptr<CoordinationClient>> CoordinationClient::Create(
    const std::string& address, const security::ChannelSecurity& security,
    absl::Duration connect_deadline) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   security::MakeChannelCredentials(security));
  grpc::ChannelArguments args;
  security::AddChannelArguments(security, &args);
  return std::unique_ptr<CoordinationClient>(new CoordinationClient(
      proto::Coordination::NewStub(
          grpc::CreateCustomChannel(address, credentials, args)),
      connect_deadline));
}

template <typename Rpc>
absl::Status CoordinationClient::Call(absl::Duration timeout, Rpc&& rpc) {
  const absl::Time give_up = absl::Now() + connect_deadline_;
  absl::Duration backoff = absl::Milliseconds(20);
  while (true) {
    grpc::ClientContext context;
    // The RPC may block on the server for `timeout`; allow for the trip.
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + timeout + absl::Seconds(10)));
    const grpc::Status status = rpc(&context);
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
        absl::Now() + backoff > give_up) {
      return wire::FromGrpcStatus(status);
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
}

namespace {
uint32_t Millis(absl::Duration d) {
  return static_cast<uint32_t>(std::clamp<int64_t>(absl::ToInt64Milliseconds(d),
                                                   1, int64_t{3600} * 1000));
}
}  // namespace

absl::Status CoordinationClient::Set(const std::string& key,
                                     const std::string& value) {
  proto::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::SetResponse response;
  return Call(absl::ZeroDuration(), [&](grpc::ClientContext* context) {
    return stub_->Set(context, request, &response);
  });
}

absl::StatusOr<std::string> CoordinationClient::Get(const std::string& key) {
  proto::GetRequest request;
  request.set_key(key);
  proto::GetResponse response;
  absl::Status status =
      Call(absl::ZeroDuration(), [&](grpc::ClientContext* context) {
        return stub_->Get(context, request, &response);
      });
  if (!status.ok()) return status;
  return response.value();
}

absl::StatusOr<std::vector<std::string>> CoordinationClient::Wait(
    const std::vector<std::string>& keys, absl::Duration timeout) {
  proto::WaitRequest request;
  for (const std::string& key : keys) request.add_keys(key);
  request.set_timeout_ms(Millis(timeout));
  proto::WaitResponse response;
  absl::Status status = Call(timeout, [&](grpc::ClientContext* context) {
    return stub_->Wait(context, request, &response);
  });
  if (!status.ok()) return status;
  return std::vector<std::string>(response.values().begin(),
                                  response.values().end());
}

absl::StatusOr<uint64_t> CoordinationClient::Barrier(const std::string& name,
                                                     uint32_t participants,
                                                     absl::Duration timeout) {
  proto::BarrierRequest request;
  request.set_name(name);
  request.set_participants(participants);
  request.set_timeout_ms(Millis(timeout));
  proto::BarrierResponse response;
  absl::Status status = Call(timeout, [&](grpc::ClientContext* context) {
    return stub_->Barrier(context, request, &response);
  });
  if (!status.ok()) return status;
  return response.generation();
}

}  // namespace embedps::client
