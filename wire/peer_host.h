// The host of a gRPC peer: what the server bounds per peer (answers not
// read, health Watch streams), every connection of a host together.
#ifndef EMBEDPS_WIRE_PEER_HOST_H_
#define EMBEDPS_WIRE_PEER_HOST_H_

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace embedps::wire {

// gRPC's peer string (ServerContext::peer()) without the port:
// "ipv4:10.0.0.5:41234" -> "ipv4:10.0.0.5", "ipv6:[::1]:50051" ->
// "ipv6:[::1]"; other forms (unix sockets) as they are.
inline std::string PeerHost(absl::string_view peer) {
  if (!absl::StartsWith(peer, "ipv4:") && !absl::StartsWith(peer, "ipv6:")) {
    return std::string(peer);
  }
  const size_t colon = peer.rfind(':');
  // "ipv6:[::1]:50051": the port follows the bracket.
  if (colon == absl::string_view::npos || colon < 5 ||
      (absl::StartsWith(peer, "ipv6:[") && peer[colon - 1] != ']')) {
    return std::string(peer);
  }
  return std::string(peer.substr(0, colon));
}

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_PEER_HOST_H_
