#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "security/flags.h"

ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(std::string, tls_key);

ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle client certificates must chain to (mutual TLS: a "
          "client without one is refused); needs --tls_cert");
ABSL_FLAG(std::string, train_token_file, "",
          "file whose one line is the training token: set (or "
          "--read_token_file), every call must carry a token this server "
          "holds; needs --tls_cert");
ABSL_FLAG(std::string, read_token_file, "",
          "file whose one line is the read-only token (Lookup, Predict, "
          "Stats, ListTables, Subscribe); needs --tls_cert");

namespace embedps::security {

ServerSecurity ServerSecurityFromFlags() {
  ServerSecurity security;
  security.cert_file = absl::GetFlag(FLAGS_tls_cert);
  security.key_file = absl::GetFlag(FLAGS_tls_key);
  security.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  security.train_token_file = absl::GetFlag(FLAGS_train_token_file);
  security.read_token_file = absl::GetFlag(FLAGS_read_token_file);
  return security;
}

}  // namespace embedps::security
