#include <string>

#include "absl/flags/flag.h"
#include "security/flags.h"

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this process: a server presents it, a "
          "client shows it to servers that require client certificates; "
          "with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle the servers this process calls are verified with; "
          "set, its calls use TLS");
ABSL_FLAG(std::string, tls_server_name, "",
          "name the servers' certificates must carry when it is not the "
          "host in their addresses (e.g. addresses by IP)");
ABSL_FLAG(std::string, token_file, "",
          "file whose one line is the token this process sends with every "
          "call (needs --tls_ca)");

namespace embedps::security {

ChannelSecurity ChannelSecurityFromFlags() {
  ChannelSecurity security;
  security.ca_file = absl::GetFlag(FLAGS_tls_ca);
  security.server_name = absl::GetFlag(FLAGS_tls_server_name);
  security.token_file = absl::GetFlag(FLAGS_token_file);
  if (security.tls()) {
    // The process's certificate doubles as its client certificate.
    security.cert_file = absl::GetFlag(FLAGS_tls_cert);
    security.key_file = absl::GetFlag(FLAGS_tls_key);
  }
  return security;
}

}  // namespace embedps::security
