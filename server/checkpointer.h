// ShardCheckpointer: checkpoints of one shard's tables (Save / AwaitSave)
// and their restore (ps_server --restore, the Load RPC).
//
// Save snapshots every table (Table::TakeSnapshot: the only time Pulls and
// Pushes wait) and writes the files on a background thread; AwaitSave
// returns what was written, for the client's manifest. One save at a time:
// a Save waits for the previous one's files first.
//
// Restore reads a checkpoint written by any number of shards: for every
// table and every old shard it applies the chain of files (the last full
// file, then the increments), keeping only the keys this shard owns now.
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_SERVER_CHECKPOINTER_H_
#define EMBEDPS_SERVER_CHECKPOINTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "checkpoint/manifest.h"
#include "common/mutex.h"
#include "proto/training.pb.h"
#include "server/memory_guard.h"
#include "server/table_registry.h"

namespace embedps::server {

class ShardCheckpointer {
 public:
  // `registry` must outlive this. `checkpoint_root` (may be empty): every
  // directory Save writes and every path Restore reads (the path given,
  // the chain of parents and the files the manifests name) must resolve
  // inside it (server/path_confinement.h), else PERMISSION_DENIED and
  // nothing is written or read; empty: Restore reads any path this
  // process can reach (ps_server --restore: the operator's own flag) and
  // the service refuses Save and Load requests (AcceptsRequests).
  // `memory` (null: no limit; must outlive this): the process's limit,
  // which a restore is admitted against (ps_server --memory_limit_mb).
  // `keep_checkpoints` > 0, on shard 0: after each of its Save's files are
  // written, the root the checkpoint is written into keeps the
  // `keep_checkpoints` newest complete checkpoints and what their chains
  // need (checkpoint/retention.h); the others are deleted. A failed prune
  // is logged, the Save stays successful.
  ShardCheckpointer(int32_t shard_index, int32_t num_shards,
                    TableRegistry* registry, std::string checkpoint_root = "",
                    MemoryGuard* memory = nullptr, int keep_checkpoints = 0);
  // Waits for a write in progress.
  ~ShardCheckpointer();
  ShardCheckpointer(const ShardCheckpointer&) = delete;
  ShardCheckpointer& operator=(const ShardCheckpointer&) = delete;

  // Restores from here on keep values only (a serving replica's): tables
  // are made with ValuesOnlyConfig (`storage`, when given, replacing each
  // table's serving.storage) and each record is cut after its embedding
  // (checkpoint::RestoreTableFile's values_only), then stored as the
  // table's serving storage says when the registry holds serving rows
  // (TableRegistry::Options::serving_rows).
  void RestoreValuesOnly(
      std::optional<proto::ServingConfig::Storage> storage = std::nullopt) {
    values_only_ = true;
    storage_ = storage;
  }

  // OK if Save and Load requests from the network are served: only with a
  // checkpoint root; FAILED_PRECONDITION saying so otherwise (a server
  // without one never writes or reads a path a request names).
  absl::Status AcceptsRequests() const;

  // Runs `take`, which takes snapshots of the tables outside a checkpoint
  // (a replica's catch-up), between Saves; since that starts the tables'
  // change sets over, the next Save writes full files.
  void SnapshotOutsideCheckpoints(absl::FunctionRef<void()> take);

  // INVALID_ARGUMENT for a bad name; FAILED_PRECONDITION if the directory
  // does not exist; the errno's status if it is not writable. Returns the
  // pause (seconds, all tables together). request.check_only: only the
  // directory is checked (0 s).
  absl::StatusOr<double> Save(const proto::SaveRequest& request);

  // The files of the save named `name` once written, or its error.
  // NOT_FOUND if no such save was started (or a later one replaced it).
  absl::StatusOr<proto::AwaitSaveResponse> AwaitSave(const std::string& name);

  // Restores the checkpoint at `path` (or the latest under it), all or
  // nothing: its tables are built and filled aside and take their places
  // together (an existing table of the same name and spec, without rows,
  // is replaced under its id); on any error the shard is exactly as it
  // was. FAILED_PRECONDITION if a table exists already with rows or with
  // another spec. Errors name the file at fault.
  // RESOURCE_EXHAUSTED, before any table is created or row read, when the
  // rows this shard would hold (the manifests' row counts) do not fit the
  // memory limit.
  absl::StatusOr<proto::LoadResponse> Restore(const std::string& path);

  // A restore in two steps, for a Load across shards that is all or
  // nothing: Prepare does Restore's work aside and holds the result under
  // `transaction` (dropping one held before); Commit makes it part of the
  // registry (Restore's errors of that step; NOT_FOUND if no restore is
  // held under that name); Abort drops it (OK if none is held).
  absl::StatusOr<proto::LoadResponse> PrepareRestore(
      const std::string& path, const std::string& transaction);
  absl::Status CommitRestore(const std::string& transaction);
  void AbortRestore(const std::string& transaction);

 private:
  struct TableSnapshotToWrite;
  // Waits for the writer thread of the last save to finish.
  void WaitForWriterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // OK if the tables of `chain` (newest first) fit the memory limit on
  // this shard: their rows here (every file of a chain down to its full
  // one counted, so a row changed in several files counts each time; a
  // share of all old shards' rows when the sharding changed), or their
  // expected_rows where that is more; RESOURCE_EXHAUSTED otherwise.
  absl::Status AdmitRestore(const std::vector<checkpoint::ChainLink>& chain,
                            const std::string& dir, bool same_sharding);

  // A checkpoint restored into tables built aside, not yet installed.
  struct PreparedRestore {
    std::string dir;
    proto::LoadResponse response;
    std::vector<std::unique_ptr<TableRegistry::PreparedTable>> tables;
  };
  absl::StatusOr<PreparedRestore> RestoreAside(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(save_mu_);
  absl::Status Install(PreparedRestore prepared)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(save_mu_);

  // The confined path of a Save's directory, present and writable.
  absl::StatusOr<std::string> CheckSaveDirectory(
      const std::string& requested) const;
  // `path` as it may be used: confined to checkpoint_root_ when set.
  absl::StatusOr<std::string> Confined(const std::string& path,
                                       absl::string_view what) const;

  const int32_t shard_index_;
  const int32_t num_shards_;
  TableRegistry* const registry_;
  const std::string checkpoint_root_;
  MemoryGuard* const memory_;
  const int keep_checkpoints_;
  bool values_only_ = false;
  std::optional<proto::ServingConfig::Storage> storage_;

  Mutex mu_;
  CondVar written_;
  // The save whose files are written (or being written).
  std::string save_name_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status save_status_ ABSL_GUARDED_BY(mu_);
  proto::AwaitSaveResponse save_response_ ABSL_GUARDED_BY(mu_);
  std::thread writer_ ABSL_GUARDED_BY(mu_);
  // The checkpoint this shard's last snapshot belongs to: incremental files
  // are only written on top of it.
  std::string last_snapshot_ ABSL_GUARDED_BY(save_mu_);
  // Serialises Save and Restore.
  Mutex save_mu_;
  // The restore a PrepareRestore holds, and its transaction.
  std::string prepared_transaction_ ABSL_GUARDED_BY(save_mu_);
  std::unique_ptr<PreparedRestore> prepared_ ABSL_GUARDED_BY(save_mu_);
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_CHECKPOINTER_H_
