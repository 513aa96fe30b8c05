#include "security/health_check.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "wire/grpc_status.h"

namespace embedps::security {
namespace {

// grpc.health.v1.HealthCheckResponse{status: SERVING}: field 1, varint 1.
constexpr char kServing[] = {0x08, 0x01};

}  // namespace

absl::Status CheckHealth(const std::string& address,
                         const ChannelSecurity& security,
                         absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                   MakeChannelCredentials(security));
  grpc::ChannelArguments args;
  AddChannelArguments(security, &args);
  grpc::GenericStub stub(grpc::CreateCustomChannel(address, credentials, args));
  // HealthCheckRequest{service: ""}: the empty message.
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = std::move(s);
                   done = true;
                   done_cv.notify_all();
                 });
  {
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
  }
  if (!status.ok()) {
    return wire::FromGrpcStatus(status);
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (bytes != std::string(kServing, sizeof(kServing))) {
    return absl::UnavailableError(absl::StrCat(address, ": not serving"));
  }
  return absl::OkStatus();
}

}  // namespace embedps::security
