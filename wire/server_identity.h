// Who answered a Pull or Push: trailing metadata every training shard adds
// to its answers, so that a client notices a shard that was restarted
// under it (client/client.h, ClientOptions::accept_restarted_shards).
//
// Thread safety: constants only.
#ifndef EMBEDPS_WIRE_SERVER_IDENTITY_H_
#define EMBEDPS_WIRE_SERVER_IDENTITY_H_

namespace embedps::wire {

// The server process's incarnation: a nonzero number drawn at start, hex.
inline constexpr char kIncarnationMetadata[] = "embedps-incarnation";
// The step of the checkpoint it restored at start, decimal (absent if
// none).
inline constexpr char kRestoredStepMetadata[] = "embedps-restored-step";
// On a replicated shard's acknowledged Push: the replica epoch in which the
// primary that answered accepted it, decimal (absent on a retry answered
// from the exactly-once log). One primary per epoch: split-brain audits.
inline constexpr char kReplicaEpochMetadata[] = "embedps-replica-epoch";

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_SERVER_IDENTITY_H_
