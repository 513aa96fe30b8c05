// The command-line flags of transport security, shared by every binary so
// that each spells them alike:
//
//   --tls_cert, --tls_key   this process's certificate and key: a server
//                           presents them; a client shows them to a server
//                           that asks (mutual TLS)
//   --tls_ca                CA bundle servers are verified with (client)
//   --tls_server_name       name expected in servers' certificates
//   --token_file            token this process sends with every call
//   --tls_client_ca         CA bundle client certificates must chain to
//   --train_token_file      tokens this server accepts (token_auth.h)
//   --read_token_file
//
// The first five are in :client_flags (every binary that calls a server),
// the last three in :server_flags (binaries that serve as well).
#ifndef EMBEDPS_SECURITY_FLAGS_H_
#define EMBEDPS_SECURITY_FLAGS_H_

#include "security/credentials.h"

namespace embedps::security {

// The files defining them, for SetProgramUsage (--help lists their flags).
inline constexpr char kClientFlagsFile[] = "security/client_flags.cc";
inline constexpr char kServerFlagsFile[] = "security/server_flags.cc";

// From :client_flags.
ChannelSecurity ChannelSecurityFromFlags();

// From :server_flags (which links :client_flags).
ServerSecurity ServerSecurityFromFlags();

}  // namespace embedps::security

#endif  // EMBEDPS_SECURITY_FLAGS_H_
