// embedps_health: asks a server's gRPC health service whether it serves,
// over the same TLS as every embedps client (--tls_ca, --tls_cert,
// --tls_key, --tls_server_name). For orchestrators' exec probes:
// Kubernetes' own gRPC probe speaks plain text only.
//
//   embedps_health --address=localhost:50051 --tls_ca=/etc/embedps/tls/ca.crt
//
// Exit 0 if the server answers SERVING within --timeout, 1 otherwise (the
// reason on stderr), 2 for a bad flag.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "common/program_usage.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "security/credentials.h"
#include "security/flags.h"

ABSL_FLAG(std::string, address, "localhost:50051", "host:port to ask");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(2), "how long to wait");

namespace {

// grpc.health.v1.HealthCheckResponse{status: SERVING} is field 1, varint 1.
constexpr char kServing[] = {0x08, 0x01};

int Run() {
  const embedps::security::ChannelSecurity security =
      embedps::security::ChannelSecurityFromFlags();
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      embedps::security::MakeChannelCredentials(security);
  if (!credentials.ok()) {
    std::fprintf(stderr, "%s\n", credentials.status().ToString().c_str());
    return 2;
  }
  grpc::ChannelArguments args;
  embedps::security::AddChannelArguments(security, &args);
  grpc::GenericStub stub(grpc::CreateCustomChannel(absl::GetFlag(FLAGS_address),
                                                   *credentials, args));
  // HealthCheckRequest{service: ""}: the empty message.
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::GetFlag(FLAGS_timeout)));
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
  std::unique_lock<std::mutex> lock(mu);
  done_cv.wait(lock, [&] { return done; });
  if (!status.ok()) {
    std::fprintf(stderr, "%s: %s\n", absl::GetFlag(FLAGS_address).c_str(),
                 status.error_message().c_str());
    return 1;
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  if (bytes != std::string(kServing, sizeof(kServing))) {
    std::fprintf(stderr, "%s: not serving\n",
                 absl::GetFlag(FLAGS_address).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "asks an embedps server's gRPC health service whether it serves "
      "(exit 0), over TLS when --tls_ca is set.\n"
      "  embedps_health --address=localhost:50051",
      {"tools/embedps_health.cc", embedps::security::kClientFlagsFile});
  absl::ParseCommandLine(argc, argv);
  return Run();
}
