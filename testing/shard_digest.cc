#include "testing/shard_digest.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "proto/stats.grpc.pb.h"

namespace embedps::testing {

absl::StatusOr<proto::StatsResponse> StatsWithDigests(
    const std::string& address) {
  auto stub = proto::StatsService::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  proto::StatsRequest request;
  request.set_content_digest(true);
  proto::StatsResponse response;
  const grpc::Status status = stub->Stats(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("Stats of ", address, ": ", status.error_message()));
  }
  return response;
}

}  // namespace embedps::testing
