// WriteOrder: how a training shard orders its writes and who of its
// processes answers for it. The training service goes through it for
// every write (Push, CreateTable, DropTable) and before every read of a
// Pull, so that it holds no replication logic of its own:
// - an unreplicated shard (NewUnreplicatedWriteOrder) applies each write
//   at once, always serves, and answers as an incarnation drawn at start;
// - a replicated shard's Replicator (replicator.h) applies writes in the
//   primary's order and forwards them to the backups, serves only as the
//   primary, and answers as the shard's lineage.
//
// Thread safety: implementations are thread-safe.
#ifndef EMBEDPS_SERVER_WRITE_ORDER_H_
#define EMBEDPS_SERVER_WRITE_ORDER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "proto/replication.pb.h"

namespace embedps::server {

class WriteOrder {
 public:
  virtual ~WriteOrder() = default;

  // OK if this process may answer Pulls and take writes now; UNAVAILABLE
  // naming the process that may (the client tries another) otherwise.
  virtual absl::Status CheckServes() = 0;

  // Runs `apply` in the shard's write order. `op` makes the write as it
  // travels to other processes (called at most once, only where the write
  // is forwarded). UNAVAILABLE with nothing applied where this process
  // may not take writes. On OK, *epoch (if given) is the epoch the write
  // was accepted in (0: no epochs here).
  virtual absl::Status Write(absl::FunctionRef<proto::ReplicatedOp()> op,
                             absl::FunctionRef<absl::Status()> apply,
                             uint64_t* epoch = nullptr) = 0;

  // OK if a checkpoint may be loaded into the shard through a Load call;
  // FAILED_PRECONDITION saying how to restore it otherwise.
  virtual absl::Status CheckLoad() = 0;

  // Who the shard is to its clients (hex; wire/server_identity.h): a new
  // value means the shard's data since its last checkpoint is gone. Empty
  // while not known.
  virtual std::string Incarnation() = 0;
};

// A shard of one process: writes apply at once. `incarnation` 0: drawn
// here.
std::unique_ptr<WriteOrder> NewUnreplicatedWriteOrder(uint64_t incarnation);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_WRITE_ORDER_H_
