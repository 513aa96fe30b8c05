#include "server/directory_client.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/grpc_status.h"

namespace embedps::server {
namespace {

class GrpcDirectoryClient final : public DirectoryClient {
 public:
  GrpcDirectoryClient(std::string address,
                      std::shared_ptr<grpc::Channel> channel)
      : address_(std::move(address)),
        stub_(proto::ReplicaDirectory::NewStub(std::move(channel))) {}

  absl::StatusOr<proto::ReplicaView> Heartbeat(
      const proto::HeartbeatRequest& request, absl::Time deadline) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    proto::HeartbeatResponse response;
    const grpc::Status status = stub_->Heartbeat(&context, request, &response);
    if (!status.ok()) return wire::FromGrpcStatus(status);
    return response.view();
  }

  absl::StatusOr<proto::ReplicaView> Report(const proto::ReplicaReport& report,
                                            absl::Time deadline) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(deadline));
    proto::ReplicaReportResponse response;
    const grpc::Status status = stub_->Report(&context, report, &response);
    if (!status.ok()) return wire::FromGrpcStatus(status);
    return response.view();
  }

  std::string Describe() const override {
    return absl::StrCat("the replica directory at ", address_);
  }

 private:
  const std::string address_;
  const std::unique_ptr<proto::ReplicaDirectory::Stub> stub_;
};

}  // namespace

std::unique_ptr<DirectoryClient> NewGrpcDirectoryClient(
    std::string address, std::shared_ptr<grpc::Channel> channel) {
  return std::make_unique<GrpcDirectoryClient>(std::move(address),
                                               std::move(channel));
}

}  // namespace embedps::server
