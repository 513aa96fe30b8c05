// Asks a server's gRPC health service (grpc.health.v1.Health/Check, the
// server as a whole) whether it serves, over the channel `security`
// describes. For probes (tools/embedps_health) and tests.
//
// Thread safety: a pure function (it makes its own channel).
#ifndef EMBEDPS_SECURITY_HEALTH_CHECK_H_
#define EMBEDPS_SECURITY_HEALTH_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "security/credentials.h"

namespace embedps::security {

// OK if the server at `address` answers SERVING within `timeout`; the
// call's error (e.g. UNAVAILABLE for a failed TLS handshake), UNAVAILABLE
// "not serving" for another answer, or the credentials' error.
absl::Status CheckHealth(const std::string& address,
                         const ChannelSecurity& security,
                         absl::Duration timeout);

}  // namespace embedps::security

#endif  // EMBEDPS_SECURITY_HEALTH_CHECK_H_
