// What a serving replica answers from: an immutable version of its tables.
//
// A version is a base — the tables of a checkpoint, restored into this
// replica's serving shard — plus overlays: the rows that publications of
// training changed since (each publication one overlay per table, newest
// first; a removed row is an entry too). A request takes the current
// version (a shared_ptr) and reads only it, so it sees exactly one
// version: a publication or a checkpoint becomes visible whole, by one
// pointer swap, never half applied. Versions share their base and their
// overlays; nothing in a version changes once it is made.
//
// Overlays do not accumulate: once every live version made on a base
// holds an overlay (no request can still read the base under it), the
// follower writes its rows into the base (WriteIntoBase) and versions made
// from then on leave it out (WithoutOldest); the versions that still list
// it read its rows from it first, so the write is invisible to them. A
// chain longer than kMaxOverlays (versions held alive for long) is
// compacted into one overlay (newest wins) when a version is made, so a
// key costs at most a few hash probes before the base's batched Lookup.
//
// Thread safety: a ServingVersion is immutable and safe to share.
#ifndef EMBEDPS_SERVER_SERVING_STATE_H_
#define EMBEDPS_SERVER_SERVING_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/tables.pb.h"
#include "server/serving_storage.h"
#include "server/table_registry.h"

namespace embedps::server {

// One table's rows changed by publications, filtered to this replica's
// keys. Immutable once made.
struct Overlay {
  // The last publication's step it holds.
  uint64_t step = 0;
  // The follower's sequence number of the version that added it (the
  // newest of those compacted into it).
  uint64_t sequence = 0;
  // key -> row index into `values`, or kRemoved.
  absl::flat_hash_map<uint64_t, uint32_t> rows;
  std::vector<float> values;  // rows × dim
  static constexpr uint32_t kRemoved = UINT32_MAX;
};

// One table of a version.
class ServingTable {
 public:
  // `registry` owns `table` and must live as long as this (the version
  // holds both). `config`: the served table's (its dim the served floats a
  // row; `table` holds rows as config.serving().storage stores them).
  // `overlays`: newest first.
  ServingTable(std::shared_ptr<TableRegistry> registry, embedding::Table* table,
               proto::TableConfig config,
               std::vector<std::shared_ptr<const Overlay>> overlays);

  const proto::TableConfig& config() const { return config_; }
  int32_t dim() const { return config_.dim(); }
  const std::vector<std::shared_ptr<const Overlay>>& overlays() const {
    return overlays_;
  }

  // The rows of `keys` into `values` (keys × dim): overlays first, then
  // the base (decoded from its storage); a key without a row gets the
  // table's unknown-key default (ServingConfig). Changes nothing. Errors
  // only from the spill tier.
  absl::Status Read(absl::Span<const uint64_t> keys,
                    absl::Span<float> values) const;

  // This table with `overlay` on top (compacting a long chain).
  std::shared_ptr<const ServingTable> With(
      std::shared_ptr<const Overlay> overlay) const;

  // This table without its oldest overlay (after WriteIntoBase of it).
  // REQUIRES: overlays() not empty.
  std::shared_ptr<const ServingTable> WithoutOldest() const;

  // Writes the rows of `overlay` (one of this table's) into the base
  // table, encoded as it stores rows: its rows replace or add the base's
  // (optimizer state zeroed: a replica never trains), its removed keys are
  // erased. Each row is written whole under its stripe's lock, in batches
  // of kWriteBatchRows (a Lookup waits for at most one batch's rows of a
  // stripe, not for the overlay). REQUIRES: every version that
  // can still read the base holds `overlay` (it shadows these keys), and
  // one writer at a time (the follower's apply lock). Errors only from
  // the spill tier; the overlay then stays, still correct.
  absl::Status WriteIntoBase(const Overlay& overlay) const;
  static constexpr size_t kWriteBatchRows = 4096;

 private:
  // The unknown-key default of `key` into `out` (dim floats).
  void Default(uint64_t key, absl::Span<float> out) const;

  const std::shared_ptr<TableRegistry> registry_;
  embedding::Table* const table_;
  const proto::TableConfig config_;
  const RowCodec codec_;
  const std::vector<std::shared_ptr<const Overlay>> overlays_;
};

struct ServingVersion {
  // The base's tables (shared by the versions made from it).
  std::shared_ptr<TableRegistry> registry;
  // The training step the version holds: the checkpoint's, then that of
  // the publications applied (the least over training shards).
  uint64_t step = 0;
  // The follower's count of versions made when this one was (increasing).
  uint64_t sequence = 0;
  // When training published it (0: a checkpoint alone).
  int64_t published_unix_micros = 0;
  // Each training shard's last applied publication step (by shard index).
  std::vector<uint64_t> source_steps;
  absl::flat_hash_map<std::string, std::shared_ptr<const ServingTable>> tables;
  // The dense model (a serialized dense.DenseModel) of step `dense_step`;
  // null if none came with the checkpoint or a publication.
  std::shared_ptr<const std::string> dense_parameters;
  uint64_t dense_step = 0;

  // Every training shard at one step, and the dense model of that step:
  // embeddings and dense weights from the same step (Predict).
  bool consistent() const;
};

// A base version from the tables of `registry` (restored from the
// checkpoint of `step`).
std::shared_ptr<const ServingVersion> BaseVersion(
    std::shared_ptr<TableRegistry> registry, uint64_t step,
    int32_t training_shards);

// Overlays are compacted when a table's chain grows past this (versions
// alive long enough to keep older overlays from being written into the
// base).
inline constexpr size_t kMaxOverlays = 6;

// Merges `overlays` (newest first) into one holding the newest row of
// every key.
std::shared_ptr<const Overlay> Compact(
    absl::Span<const std::shared_ptr<const Overlay>> overlays, int32_t dim);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_SERVING_STATE_H_
