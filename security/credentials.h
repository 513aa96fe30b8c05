// Transport security of every embedps gRPC port and channel: TLS from PEM
// files (the server's certificate and key; a CA that clients verify the
// server with; for mutual TLS, a CA the server verifies clients with and a
// client certificate), and bearer tokens on top of it (token_auth.h).
//
// Everything empty means plain text, as before: the options are opt-in so
// that loopback jobs and tests run unchanged. A token without TLS is
// refused: a token sent in plain text is a token given away.
//
// Thread safety: pure functions (they read the named files).
#ifndef EMBEDPS_SECURITY_CREDENTIALS_H_
#define EMBEDPS_SECURITY_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace embedps::security {

// A server's side: what it presents and whom it accepts.
struct ServerSecurity {
  // PEM certificate chain and private key the server presents; both or
  // neither. Default: none (plain text).
  std::string cert_file;
  std::string key_file;
  // PEM CA bundle client certificates must chain to (mutual TLS: a client
  // without one is refused at the handshake). Needs cert_file. Default:
  // none (clients are not asked for a certificate).
  std::string client_ca_file;
  // Files holding the training token (every call) and the read-only token
  // (token_auth.h lists what it may call), one line each; when either is
  // set every call must carry one of them. Needs cert_file. Default: none.
  std::string train_token_file;
  std::string read_token_file;

  bool tls() const { return !cert_file.empty(); }
};

// A client's side: whom it trusts and what it shows.
struct ChannelSecurity {
  // PEM CA bundle the server's certificate must chain to; set, the channel
  // is TLS. Default: none (plain text).
  std::string ca_file;
  // PEM certificate and key shown to a server that asks (mutual TLS);
  // both or neither, and only with ca_file. Default: none.
  std::string cert_file;
  std::string key_file;
  // File holding the token sent with every call (one line). Needs ca_file.
  // Default: none.
  std::string token_file;
  // The name the server's certificate must carry, when it is not the
  // host part of the address (an address by IP, a test CA). Default: the
  // address's host.
  std::string server_name;

  bool tls() const { return !ca_file.empty(); }
};

// The credentials `security` describes: insecure ones when it is empty.
// INVALID_ARGUMENT for a combination that cannot work (a key without a
// certificate, a token without TLS), naming the field; NOT_FOUND or
// INVALID_ARGUMENT for a file that cannot be read or holds no PEM block.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ChannelSecurity& security);

// Channel arguments `security` needs beyond its credentials (the server
// name override), added to `args`.
void AddChannelArguments(const ChannelSecurity& security,
                         grpc::ChannelArguments* args);

// The arguments every embedps channel starts from: `security`'s (as
// AddChannelArguments) and reconnection within a second of a peer's return
// (gRPC's default backoff grows to two minutes, so a restarted shard,
// primary or directory would be found that late).
grpc::ChannelArguments ChannelArgumentsFor(const ChannelSecurity& security);

// The contents of `path` (NOT_FOUND naming `what` if it cannot be read).
absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           const char* what);

}  // namespace embedps::security

#endif  // EMBEDPS_SECURITY_CREDENTIALS_H_
