#include "security/credentials.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpc/grpc_security_constants.h"
#include "grpcpp/support/channel_arguments.h"
#include "security/token_auth.h"

namespace embedps::security {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  ASSIGN_OR_RETURN(std::string pem, ReadSecretFile(path, what));
  if (!absl::StrContains(pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' holds no PEM block"));
  }
  return pem;
}

// A token file's one line, without its line break; INVALID_ARGUMENT if
// that is empty.
absl::StatusOr<std::string> ReadToken(const std::string& path,
                                      const char* what) {
  ASSIGN_OR_RETURN(std::string token, ReadSecretFile(path, what));
  absl::StripAsciiWhitespace(&token);
  if (token.empty() || absl::StrContains(token, "\n")) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " '", path, "' must hold one non-empty line (the token)"));
  }
  return token;
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           const char* what) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerSecurity& security) {
  const bool tokens =
      !security.train_token_file.empty() || !security.read_token_file.empty();
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError(
        "the TLS certificate and key come together: set both or neither");
  }
  if (!security.tls()) {
    if (!security.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "a client CA (mutual TLS) needs the server's TLS certificate");
    }
    if (tokens) {
      return absl::InvalidArgumentError(
          "tokens need TLS (a certificate and key): a token sent in plain "
          "text is a token given away");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions options(
      security.client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.private_key,
                   ReadPem(security.key_file, "TLS private key"));
  ASSIGN_OR_RETURN(pair.cert_chain,
                   ReadPem(security.cert_file, "TLS certificate"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!security.client_ca_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadPem(security.client_ca_file, "client CA"));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::SslServerCredentials(options);
  if (tokens) {
    std::string train, read;
    if (!security.train_token_file.empty()) {
      ASSIGN_OR_RETURN(train,
                       ReadToken(security.train_token_file, "training token"));
    }
    if (!security.read_token_file.empty()) {
      ASSIGN_OR_RETURN(read,
                       ReadToken(security.read_token_file, "read-only token"));
    }
    if (train == read) {
      return absl::InvalidArgumentError(
          "the training and read-only tokens must differ");
    }
    credentials->SetAuthMetadataProcessor(
        NewTokenProcessor(std::move(train), std::move(read)));
  }
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ChannelSecurity& security) {
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError(
        "the client's TLS certificate and key come together: set both or "
        "neither");
  }
  if (!security.tls()) {
    if (!security.cert_file.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs the CA that verifies the server "
          "(TLS)");
    }
    if (!security.token_file.empty()) {
      return absl::InvalidArgumentError(
          "a token needs TLS (the CA that verifies the server): a token sent "
          "in plain text is a token given away");
    }
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions options;
  ASSIGN_OR_RETURN(options.pem_root_certs,
                   ReadPem(security.ca_file, "server CA"));
  if (!security.cert_file.empty()) {
    ASSIGN_OR_RETURN(options.pem_private_key,
                     ReadPem(security.key_file, "client TLS key"));
    ASSIGN_OR_RETURN(options.pem_cert_chain,
                     ReadPem(security.cert_file, "client TLS certificate"));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::SslCredentials(options);
  if (!security.token_file.empty()) {
    ASSIGN_OR_RETURN(std::string token,
                     ReadToken(security.token_file, "token"));
    // Sent as "authorization: Bearer TOKEN" with every call.
    credentials = grpc::CompositeChannelCredentials(
        credentials, grpc::AccessTokenCredentials(token));
  }
  return credentials;
}

void AddChannelArguments(const ChannelSecurity& security,
                         grpc::ChannelArguments* args) {
  if (security.tls() && !security.server_name.empty()) {
    args->SetSslTargetNameOverride(security.server_name);
  }
}

grpc::ChannelArguments ChannelArgumentsFor(const ChannelSecurity& security) {
  grpc::ChannelArguments args;
  AddChannelArguments(security, &args);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

}  // namespace embedps::security
