// "host:port" as gRPC reads a listening address or a target.
#ifndef EMBEDPS_WIRE_HOST_PORT_H_
#define EMBEDPS_WIRE_HOST_PORT_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace embedps::wire {

// `host` and `port` joined: an IPv6 literal ("::1", "fe80::1%eth0") in
// brackets ("[::1]:50051", as gRPC and RFC 3986 write it); a name, an
// IPv4 address or an already bracketed literal as it is.
inline std::string HostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

// Whether `host` names this machine's loopback only.
inline bool IsLoopbackHost(absl::string_view host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" ||
         host == "[::1]";
}

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_HOST_PORT_H_
