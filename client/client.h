// Client: the C++ library a training program uses to talk to the shards.
//
// A Pull or Push takes the caller's keys in any order with any duplicates:
// the client deduplicates them (summing the gradients of duplicate keys on
// Push), groups them by shard (JumpConsistentHash of Mix64), sends every
// shard its part in parallel (chunked above `max_keys_per_request`),
// retries UNAVAILABLE and DEADLINE_EXCEEDED with exponential backoff until
// `retry_deadline`, and scatters the rows back into the caller's order.
//
// Thread safety: a Client is thread-safe; several training threads may
// share one. A TableHandle is an immutable value. A call's parts travel
// on gRPC's callback API and the calling thread waits for their
// completions, which gRPC's own threads deliver: do not call the client
// from one of those threads (a gRPC reactor or completion callback).
#ifndef EMBEDPS_CLIENT_CLIENT_H_
#define EMBEDPS_CLIENT_CLIENT_H_

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/retry.h"
#include "proto/checkpoint.pb.h"
#include "proto/stats.pb.h"
#include "proto/tables.pb.h"
#include "proto/training.pb.h"
#include "security/credentials.h"

namespace embedps::client {

struct ClientOptions {
  // "host:port" of every shard, in shard order (index = shard index).
  std::vector<std::string> servers;
  // Deadline of one RPC attempt, how long a call keeps retrying
  // UNAVAILABLE / DEADLINE_EXCEEDED, and the backoff between attempts.
  RetryPolicy retry;
  // Keys per RPC; bigger batches are split. Default: 256 Ki.
  size_t max_keys_per_request = size_t{256} << 10;
  // Encoding of values and gradients on the wire. Default: FLOAT32.
  proto::ValueType wire_type = proto::FLOAT32;
  // Largest gRPC message, in bytes. Default: 1 GiB.
  int max_message_bytes = 1 << 30;
  // TCP connections (gRPC channels) to each shard; RPCs take them in turn.
  // More than one lets several requests in flight to one shard travel on
  // separate HTTP/2 connections. Default: 1.
  int channels_per_shard = 1;
  // TLS and the token calls carry (security/credentials.h). Default:
  // plain text.
  security::ChannelSecurity security;
  // A shard that answers as a different server process than before (it
  // was restarted, and holds only what it restored, if anything) fails
  // every Pull and Push to it with ABORTED, naming the shard and the step
  // it restored: training on it would silently lose the updates since its
  // checkpoint. True: the client carries on with the new process (a
  // client that knows this is safe, e.g. one that only reads). Default:
  // false.
  bool accept_restarted_shards = false;
  // The cluster the servers must belong to (ps_server --cluster_id); empty:
  // any, as long as all of them say the same. Before its first call that
  // reads or changes tables the client asks every shard who it is and
  // refuses (FAILED_PRECONDITION naming the servers and what each said)
  // servers that are not this cluster's training shards 0..n-1 in the
  // order given (client/identity_check.h). Default: "".
  std::string cluster_id;
};

// A table as this client addresses it: its id on each shard.
struct TableHandle {
  std::string name;
  int32_t dim = 0;
  std::vector<uint32_t> shard_table_ids;
  // How pushes combine; SYNC and SSP Pushes close the caller's step on
  // every shard, and their Pulls may wait up to `step_timeout` for other
  // workers.
  proto::ConsistencyConfig::Mode mode = proto::ConsistencyConfig::ASYNC;
  absl::Duration step_timeout = absl::ZeroDuration();
  // The table's config: the one CreateTable sent, or the shards' (OpenTable).
  std::shared_ptr<const proto::TableConfig> config;
};

class Client {
 public:
  // Opens a channel to every server. INVALID_ARGUMENT for an empty list.
  // Channels connect lazily: an unreachable server shows up as UNAVAILABLE
  // on the first call that needs it, and the servers' identities are
  // checked by the first call that reads or changes tables
  // (ClientOptions::cluster_id).
  static absl::StatusOr<std::unique_ptr<Client>> Connect(ClientOptions options);

  ~Client();

  int32_t num_shards() const;

  // Creates the table on every shard (idempotent: an existing table with the
  // same spec is fine) and returns its handle.
  absl::StatusOr<TableHandle> CreateTable(const proto::TableConfig& config);

  // The handle of the table named `name`, which every shard holds (asked
  // with ListTables). NOT_FOUND naming a shard that does not hold it.
  absl::StatusOr<TableHandle> OpenTable(const std::string& name);

  // Drops the table named `name` on every shard, freeing its memory; its
  // handles stop working (NOT_FOUND). A shard that no longer holds it (a
  // retried drop) is fine; NOT_FOUND if no shard held it.
  absl::Status DropTable(const std::string& name);

  // What the caller knows about its keys.
  enum class Keys {
    // Any order, any duplicates: the client deduplicates them (one hash
    // map pass), so each distinct key travels once.
    kAny,
    // The caller deduplicated them already (a training loop that gathers a
    // batch's unique keys): the client skips its own pass. Duplicates are
    // still answered correctly (the shards handle them), only not saved.
    kUnique,
  };

  // Writes the row of every key into `values` (keys.size() × dim floats).
  // INVALID_ARGUMENT if the size does not match; otherwise the first error
  // of any shard, after retries.
  absl::Status Pull(const TableHandle& table, absl::Span<const uint64_t> keys,
                    absl::Span<float> values, uint64_t step = 0,
                    Keys keys_are = Keys::kAny);

  // Sends the gradients (keys.size() × dim floats); duplicate keys' rows
  // are summed before sending. Each RPC carries this client's id and a
  // fresh sequence number, so a retried RPC is not applied twice. For SYNC
  // and SSP tables this call is the caller's whole step `step`: every
  // shard is told the step is complete (shards without keys get an empty
  // closing push).
  absl::Status Push(const TableHandle& table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads, uint64_t step = 0,
                    Keys keys_are = Keys::kAny);

  // Pull without side effects (serving, evaluation): creates no row and
  // changes no access metadata or admission counter; a key without a row
  // gets the initial values a Pull would have given it. SYNC/SSP tables
  // wait as a Pull of `step` would.
  absl::Status Lookup(const TableHandle& table, absl::Span<const uint64_t> keys,
                      absl::Span<float> values, uint64_t step = 0,
                      Keys keys_are = Keys::kAny);

  // Asynchronous forms of Pull, Lookup and Push: start the call and return
  // at once (no thread is started: the calls complete on gRPC's callback
  // threads); the future yields its status. The spans are borrowed: `keys`,
  // `values` and `grads` must stay alive (and `keys`/`grads` unchanged)
  // until the future is ready. This lets a worker pull the next batch while
  // it computes on the current one. Destroying the client cancels the
  // calls still in flight (their futures yield CANCELLED) and waits for
  // them (at most a retry backoff).
  //
  // `canceller` (may be null) lets the caller end a Pull or Lookup early
  // (Ctrl-C in Python): CallCanceller::Cancel cancels its attempts in
  // flight and its retries; the future then yields CANCELLED (or its
  // outcome, if it ended first) within a retry backoff at most, and
  // `values` is not written after the future is ready.
  class CallCanceller {
   public:
    CallCanceller();
    ~CallCanceller();
    CallCanceller(const CallCanceller&) = delete;
    CallCanceller& operator=(const CallCanceller&) = delete;
    void Cancel();

   private:
    friend class Client;
    struct State;
    std::shared_ptr<State> state_;
  };
  std::future<absl::Status> PullAsync(const TableHandle& table,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<float> values,
                                      uint64_t step = 0,
                                      Keys keys_are = Keys::kAny,
                                      CallCanceller* canceller = nullptr);
  std::future<absl::Status> LookupAsync(const TableHandle& table,
                                        absl::Span<const uint64_t> keys,
                                        absl::Span<float> values,
                                        uint64_t step = 0,
                                        Keys keys_are = Keys::kAny,
                                        CallCanceller* canceller = nullptr);
  std::future<absl::Status> PushAsync(const TableHandle& table,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<const float> grads,
                                      uint64_t step = 0,
                                      Keys keys_are = Keys::kAny);

  // Publishes every shard's rows changed since its last publication, at
  // training step `step`, to the serving replicas that follow it; the
  // dense model of the same step (a serialized dense model, may be empty)
  // goes with shard 0's. SYNC/SSP shards publish once `step` is applied on
  // them. The first call starts the shards' change logs: a job calls it at
  // its start. Returns the rows published, all shards.
  absl::StatusOr<uint64_t> Publish(uint64_t step,
                                   const std::string& dense_parameters);

  // Deletion on request: removes the rows of `keys` (any order; duplicates
  // count once) from every shard that holds them, in memory and in its
  // spill tier; serving replicas drop them with the next publication, and
  // checkpoints written afterwards do not hold them. A later Pull of such
  // a key starts from its initial vector. Returns the rows removed per
  // shard, in shard order (keys without a row count nothing).
  absl::StatusOr<std::vector<uint64_t>> Erase(const TableHandle& table,
                                              absl::Span<const uint64_t> keys);

  // ---- A job's hot-row tier (docs/architecture.md "Hot rows"): rows its
  // workers train themselves, read with their optimizer state and written
  // back before every checkpoint and publication.

  struct HotKey {
    uint64_t key;
    uint32_t access_count;  // Pulls of the row (saturating)
  };
  // The `count` keys of `table` pulled most, over every shard, most pulled
  // first (ties: the smaller key first). Each shard scans its rows once.
  absl::StatusOr<std::vector<HotKey>> HotKeys(const TableHandle& table,
                                              uint32_t count);

  // The rows of `keys` (distinct) with their optimizer state, as records
  // (embedding::RowRecordBytes each: last touch, access count, embedding,
  // state) into `records`; found[i] says whether key i has a row (zeros
  // otherwise). Never creates or changes a row. SYNC/SSP tables answer as
  // a Pull of `step` would. INVALID_ARGUMENT if the sizes disagree.
  absl::Status ReadRows(const TableHandle& table,
                        absl::Span<const uint64_t> keys, uint64_t step,
                        absl::Span<char> records, absl::Span<bool> found);

  // The write-back: the row of each of `keys` (distinct) takes the
  // embedding and optimizer state of its record; written[i] is false for a
  // key without a row (erased or evicted since it was read: never
  // created). In each shard's write order, forwarded to its backups; the
  // rows count as changed for checkpoints and publications.
  absl::Status WriteRows(const TableHandle& table,
                         absl::Span<const uint64_t> keys,
                         absl::Span<const char> records, uint64_t step,
                         absl::Span<bool> written);

  // Stats of every shard, in shard order.
  absl::StatusOr<std::vector<proto::StatsResponse>> Stats();

  // ---- Checkpoints (layout and guarantees: docs/checkpoints.md).

  struct CheckpointOptions {
    // The directory of checkpoints; every shard must reach it (the same
    // machine or a shared file system).
    std::string root;
    // The training step the checkpoint holds.
    uint64_t step = 0;
    // Write only what changed since the latest complete checkpoint under
    // `root` (shards that cannot, e.g. after a restart, write full files).
    bool incremental = false;
    // Retention: once this checkpoint is complete, keep the `keep` newest
    // complete checkpoints under `root` and the chains they build on, and
    // delete the others (checkpoint/retention.h). 0: delete nothing.
    // Default: 0.
    int keep = 0;
  };

  // A checkpoint whose tables are snapshotted and being written.
  class PendingCheckpoint {
   public:
    // Where the checkpoint is written (ROOT/NAME.tmp until Finish): the
    // trainer may add its own files here before calling Finish.
    const std::string& directory() const { return directory_; }
    const std::string& name() const { return name_; }
    // The longest pause of any shard while its tables were snapshotted.
    double pause_seconds() const { return pause_seconds_; }

    // Waits for every shard's files, checksums `extra_files` (paths
    // relative to directory()), writes the manifest and renames the
    // directory to ROOT/NAME: from then on the checkpoint exists.
    absl::StatusOr<proto::CheckpointManifest> Finish(
        const std::vector<std::string>& extra_files = {});

    // After Finish with CheckpointOptions::keep: the checkpoints deleted,
    // and the error of a deletion that failed (the checkpoint itself is
    // complete either way; nothing kept was touched).
    const std::vector<std::string>& pruned() const { return pruned_; }
    const absl::Status& prune_status() const { return prune_status_; }

   private:
    friend class Client;
    PendingCheckpoint() = default;
    Client* client_ = nullptr;
    std::string root_, name_, directory_, parent_;
    uint64_t step_ = 0;
    int keep_ = 0;
    std::vector<std::string> pruned_;
    absl::Status prune_status_;
    double pause_seconds_ = 0;
    std::vector<proto::TableConfig> tables_;
  };

  // Snapshots every table on every shard at once and returns when the
  // snapshots are taken (Pushes may continue; they are not in this
  // checkpoint). ALREADY_EXISTS if ROOT/NAME exists.
  absl::StatusOr<std::unique_ptr<PendingCheckpoint>> StartCheckpoint(
      const CheckpointOptions& options);

  // StartCheckpoint, then Finish.
  absl::StatusOr<proto::CheckpointManifest> Checkpoint(
      const CheckpointOptions& options);

  // Makes `root` (a checkpoint root, as CheckpointOptions::root) if it is
  // missing and asks every shard whether it could save there (inside its
  // --checkpoint_root, present on its file system, writable); nothing is
  // written. The first shard's refusal, naming it: what a job asks before
  // it trains rather than at its first checkpoint.
  absl::Status CheckCheckpointRoot(const std::string& root);

  // Every shard restores the checkpoint at `path` (a checkpoint directory,
  // or a root: the latest complete checkpoint) into tables it does not
  // have yet, or has without rows, all or nothing: on any shard's error
  // (the file at fault named) no shard has changed. Returns the
  // checkpoint's name and step and the rows of all shards.
  absl::StatusOr<proto::LoadResponse> Load(const std::string& path);

  uint64_t client_id() const;

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  // Start a Pull (or a Lookup) or a Push; the future is ready when it
  // finished.
  std::future<absl::Status> StartPull(const TableHandle& table,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<float> values, uint64_t step,
                                      bool read_only, Keys keys_are,
                                      CallCanceller* canceller = nullptr);
  std::future<absl::Status> StartPush(const TableHandle& table,
                                      absl::Span<const uint64_t> keys,
                                      absl::Span<const float> grads,
                                      uint64_t step, Keys keys_are);
  std::unique_ptr<Impl> impl_;
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_CLIENT_H_
