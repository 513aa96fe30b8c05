// TrainingService: the gRPC face of one training shard — its tables, the
// Pull and Push of rows, checkpoints (Save, AwaitSave, Load), and the
// publications serving replicas follow (Publish, Subscribe).
//
// Translates requests into spans over the engine's tables and back; every
// malformed request is refused with a precise status before any table is
// touched, so a client cannot corrupt a table or crash the server. Writes
// and the reads of a Pull go through the shard's WriteOrder
// (write_order.h), which alone knows whether the shard is replicated.
//
// Thread safety: gRPC calls the handlers from many threads at once; the
// registry and tables are thread-safe and the counters are atomic.
#ifndef EMBEDPS_SERVER_TRAINING_SERVICE_H_
#define EMBEDPS_SERVER_TRAINING_SERVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "proto/replication.pb.h"
#include "proto/stats.pb.h"
#include "proto/training.grpc.pb.h"
#include "server/checkpointer.h"
#include "server/memory_guard.h"
#include "server/peer_budget.h"
#include "server/publisher.h"
#include "server/push_deduplicator.h"
#include "server/rejections.h"
#include "server/rpc_metrics.h"
#include "server/table_registry.h"
#include "server/write_order.h"

namespace embedps::server {

struct TrainingServiceOptions {
  // This server's shard and the number of shards; a key is this shard's
  // iff ShardOfKey(key, num_shards) == shard_index. Default: 0 of 1.
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  // Keys one Pull or Push may carry. Default: 4 Mi.
  uint64_t max_keys_per_request = uint64_t{4} << 20;
  // Bytes the values of one Pull's response may take (keys x dim x 4, or
  // 2 in float16): checked before anything is pulled. Default: 1 GiB
  // (ps_server: --max_message_bytes).
  uint64_t max_response_bytes = uint64_t{1} << 30;
  // Bytes of Pull answers built for one peer host and not yet taken by it
  // (peer_budget.h): past it the host's Pulls are answered UNAVAILABLE
  // until it reads; 0: no bound. Default: 1 GiB.
  uint64_t max_unread_bytes_per_peer = uint64_t{1} << 30;
  // Counters (a byte each) a table's admission sketch may ask for.
  // Default: 256 Mi.
  uint64_t max_sketch_counters = uint64_t{1} << 28;
  // A Pull of many keys reads the table on up to this many threads
  // (pieces of at least 16384 keys; 1: on the call's thread). Default: 4
  // (ps_server: --pull_threads).
  int32_t pull_threads = 4;
  // Tables held at once (DropTable frees a place). Default: 256.
  size_t max_tables = 256;
  // The process's resident memory past which calls that would allocate
  // are refused (memory_guard.h; the shard makes one guard of it, shared
  // with its checkpoints' restore and its replica's catch-up); 0: no
  // limit. Default: 0.
  uint64_t memory_limit_bytes = 0;
  // Who this server is: a number drawn at start, sent with every Pull and
  // Push answer (wire/server_identity.h) so that a client notices a shard
  // that was restarted under it (its updates since the last checkpoint
  // gone) instead of training on it. 0: drawn at start. A replicated
  // shard answers as its lineage instead. Default: 0.
  uint64_t incarnation = 0;
  // The step of the checkpoint the shard restored at start, sent beside
  // the incarnation (wire/server_identity.h). -1: none. Default: -1.
  int64_t restored_step = -1;
  // Test only: after applying a Push, answer UNAVAILABLE with this
  // probability, as if the response were lost (the client retries; the
  // retry must not be applied again). Default: 0.
  double TEST_drop_push_response_probability = 0.0;
};

// Pull and Push, the bulk methods, are served through gRPC's callback API
// on the messages' bytes (wire/bulk_message.h): keys are read from the
// received slices and pulled values go out in a buffer of their own, with
// no protobuf copy either way. The other methods are ordinary synchronous
// handlers.
using TrainingServiceBase = proto::TrainingService::WithRawCallbackMethod_Pull<
    proto::TrainingService::WithRawCallbackMethod_Push<
        proto::TrainingService::Service>>;

class TrainingServiceImpl final : public TrainingServiceBase {
 public:
  // Every pointer must outlive the service. `writes`: the shard's write
  // order; `deduplicator`: its exactly-once log (a replicator exports and
  // imports it too); `memory`: the guard of options.memory_limit_bytes,
  // which calls that would allocate are admitted against; every call is
  // recorded in `metrics`.
  TrainingServiceImpl(TrainingServiceOptions options, TableRegistry* registry,
                      WriteOrder* writes, PushDeduplicator* deduplicator,
                      ShardCheckpointer* checkpointer, Publisher* publisher,
                      RpcMetrics* metrics, MemoryGuard* memory);
  // Waits for Pulls still waiting on their own threads (see Pull).
  ~TrainingServiceImpl() override;

  grpc::Status CreateTable(grpc::ServerContext* context,
                           const proto::CreateTableRequest* request,
                           proto::CreateTableResponse* response) override;
  // Removes a table from this shard (the client drops it on every shard).
  grpc::Status DropTable(grpc::ServerContext* context,
                         const proto::DropTableRequest* request,
                         proto::DropTableResponse* response) override;
  grpc::Status ListTables(grpc::ServerContext* context,
                          const proto::ListTablesRequest* request,
                          proto::ListTablesResponse* response) override;
  // A Pull of a SYNC or SSP table may have to wait for other workers'
  // steps; one that must waits on a thread of its own, not on one of
  // gRPC's callback threads.
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::Status Save(grpc::ServerContext* context,
                    const proto::SaveRequest* request,
                    proto::SaveResponse* response) override;
  grpc::Status AwaitSave(grpc::ServerContext* context,
                         const proto::AwaitSaveRequest* request,
                         proto::AwaitSaveResponse* response) override;
  grpc::Status Load(grpc::ServerContext* context,
                    const proto::LoadRequest* request,
                    proto::LoadResponse* response) override;
  grpc::Status Publish(grpc::ServerContext* context,
                       const proto::PublishRequest* request,
                       proto::PublishResponse* response) override;
  // Removes the rows of the request's keys (keys of this shard, at most
  // max_keys_per_request), in the shard's write order.
  grpc::Status Erase(grpc::ServerContext* context,
                     const proto::EraseRequest* request,
                     proto::EraseResponse* response) override;
  // The hot-row tier of a job's workers (training.proto): the shard's
  // most pulled keys of a table; their rows with optimizer state (a SYNC
  // or SSP table answers once the request's step is pullable); and their
  // write-back, in the shard's write order (forwarded to backups).
  grpc::Status HotKeys(grpc::ServerContext* context,
                       const proto::HotKeysRequest* request,
                       proto::HotKeysResponse* response) override;
  grpc::Status ReadRows(grpc::ServerContext* context,
                        const proto::ReadRowsRequest* request,
                        proto::ReadRowsResponse* response) override;
  grpc::Status WriteRows(grpc::ServerContext* context,
                         const proto::WriteRowsRequest* request,
                         proto::WriteRowsResponse* response) override;
  // Streams publications until the subscriber goes, the server shuts down,
  // or the publisher cannot continue the subscriber's sequence.
  grpc::Status Subscribe(
      grpc::ServerContext* context, const proto::SubscribeRequest* request,
      grpc::ServerWriter<proto::Publication>* writer) override;

  // Applies a write its primary forwarded, checked as a client's
  // (Replicator::ApplyForwarded).
  absl::Status ApplyForwarded(const proto::ReplicatedOp& op);

  // The training shard's part of a Stats answer: its shard, its tables
  // (those `request` names, or all), the requests refused and the pushes
  // acknowledged as retries. NOT_FOUND for a table id it does not hold.
  absl::Status FillStats(const proto::StatsRequest& request,
                         proto::StatsResponse* response);

 private:
  grpc::Status CreateTableImpl(const proto::CreateTableRequest& request,
                               proto::CreateTableResponse* response);
  grpc::Status EraseImpl(const proto::EraseRequest& request,
                         proto::EraseResponse* response);
  grpc::Status WriteRowsImpl(const proto::WriteRowsRequest& request,
                             proto::WriteRowsResponse* response);
  // A write in the shard's order (forwarded to backups when replicated):
  // `op` is what the backups apply, `apply` applies it here; measured as
  // `method`.
  grpc::Status WriteInOrder(RpcMethod method,
                            absl::FunctionRef<proto::ReplicatedOp()> op,
                            absl::FunctionRef<grpc::Status()> apply);
  // The table of a read call, if this shard serves calls (a backup does
  // not) and holds it.
  grpc::Status ServedTable(uint32_t table_id, TableRegistry::Entry* entry);
  // The table and the checked keys (key_checks.h) of a key-addressed call.
  grpc::Status TableAndKeys(uint32_t table_id, const std::string& key_bytes,
                            TableRegistry::Entry* entry,
                            std::vector<uint64_t>* keys);
  // A Pull whose request has been read and checked.
  struct PullCall {
    proto::PullRequest header;  // all but the keys
    TableRegistry::Entry entry;
    std::vector<uint64_t> keys;
    uint64_t response_bytes = 0;  // the values the answer will carry
  };
  grpc::Status ParsePull(const grpc::ByteBuffer& request, PullCall* call);
  grpc::Status ServePull(const PullCall& call, grpc::ByteBuffer* response);
  // After a Pull read `keys` into `values` at AppliedThrough() == read_at
  // and its `step` became pullable: reads again the keys the steps applied
  // since changed (all of them when those are no longer remembered).
  static absl::Status RereadChanged(StepSynchronizer& synchronizer,
                                    embedding::Table& table, uint64_t read_at,
                                    uint64_t step,
                                    absl::Span<const uint64_t> keys,
                                    absl::Span<float> values, int32_t threads);
  // Checks and applies a Push. `forwarded`: a write its primary forwarded
  // (applied here as it is, not through the write order). On OK, *epoch
  // (if given) is the epoch the write order accepted it in.
  grpc::Status PushImpl(const grpc::ByteBuffer& request, bool forwarded,
                        uint64_t* epoch = nullptr);
  // Runs `work` on a thread of its own (counted in detached_running_).
  void RunDetached(absl::AnyInvocable<void() &&> work);
  // Adds this shard's incarnation (and restored step) to the answer.
  void Identify(grpc::CallbackServerContext* context);

  const TrainingServiceOptions options_;
  TableRegistry* const registry_;
  WriteOrder* const writes_;
  PushDeduplicator* const deduplicator_;
  ShardCheckpointer* const checkpointer_;
  Publisher* const publisher_;
  RpcMetrics* const metrics_;
  MemoryGuard* const memory_;
  // The values of the server-identity metadata.
  const std::string restored_step_;
  Rejections rejections_;
  PeerBudget unread_;
  Mutex detached_mu_;
  CondVar detached_done_;
  int detached_running_ ABSL_GUARDED_BY(detached_mu_) = 0;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_TRAINING_SERVICE_H_
