// embedps_health: asks a server's gRPC health service whether it serves,
// over the same TLS as every embedps client (--tls_ca, --tls_cert,
// --tls_key, --tls_server_name). For orchestrators' exec probes:
// Kubernetes' own gRPC probe speaks plain text only.
//
//   embedps_health --address=localhost:50051 --tls_ca=/etc/embedps/tls/ca.crt
//
// Exit 0 if the server answers SERVING within --timeout, 1 otherwise (the
// reason on stderr), 2 for a bad flag.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/time.h"
#include "common/program_usage.h"
#include "security/flags.h"
#include "security/health_check.h"

ABSL_FLAG(std::string, address, "localhost:50051", "host:port to ask");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(2), "how long to wait");

namespace {

int Run() {
  const embedps::security::ChannelSecurity security =
      embedps::security::ChannelSecurityFromFlags();
  const absl::Status status = embedps::security::CheckHealth(
      absl::GetFlag(FLAGS_address), security, absl::GetFlag(FLAGS_timeout));
  if (status.ok()) return 0;
  std::fprintf(stderr, "%s: %s\n", absl::GetFlag(FLAGS_address).c_str(),
               std::string(status.message()).c_str());
  // A certificate or key that cannot be used is a bad flag.
  return status.code() == absl::StatusCode::kInvalidArgument ||
                 status.code() == absl::StatusCode::kNotFound
             ? 2
             : 1;
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
