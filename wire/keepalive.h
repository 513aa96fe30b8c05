// Keepalive pings on our gRPC connections, so that a peer that vanished
// without closing them (a host cut off, a machine that lost power) is
// found in seconds instead of after TCP's retransmissions (~15 minutes):
// a call to it fails with UNAVAILABLE and the client's retry moves on (to
// another replica of the shard, docs/operations.md "Replication").
//
// Clients ping every kPingInterval while they have calls open and drop
// the connection when a ping is not acknowledged within kPingTimeout;
// servers accept such pings (gRPC's default policy answers pings more
// frequent than every 5 minutes with GOAWAY). Peers that do not ping are
// unaffected.
#ifndef EMBEDPS_WIRE_KEEPALIVE_H_
#define EMBEDPS_WIRE_KEEPALIVE_H_

#include "grpcpp/grpcpp.h"

namespace embedps::wire {

inline constexpr int kPingIntervalMs = 2000;
inline constexpr int kPingTimeoutMs = 4000;

// For channels to our servers.
inline void PingWhileCallsAreOpen(grpc::ChannelArguments& args) {
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, kPingIntervalMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, kPingTimeoutMs);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  // A call that waits (a SYNC Pull) sends no data: keep pinging anyway.
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
}

// For our servers: clients' pings every kPingIntervalMs are welcome.
inline void AcceptClientPings(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      kPingIntervalMs / 2);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
}

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_KEEPALIVE_H_
