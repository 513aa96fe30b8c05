// The tables one ps_server holds, by name and by numeric id, each with its
// consistency mode.
//
// An Entry holds its table: the pointers in it stay valid while the Entry
// (or a copy) lives, also after the table is dropped; a dropped table is
// freed when its last Entry goes. Ids are never reused.
// Thread safety: all methods are thread-safe.
#ifndef EMBEDPS_SERVER_TABLE_REGISTRY_H_
#define EMBEDPS_SERVER_TABLE_REGISTRY_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "embedding/table.h"
#include "proto/tables.pb.h"
#include "server/step_synchronizer.h"

namespace embedps::server {

class TableRegistry {
 private:
  struct Slot;

 public:
  struct Options {
    // The workers the SYNC and SSP modes wait for.
    int32_t num_workers = 1;
    // Threads a completed SYNC step of many keys is applied on
    // (StepSynchronizer's apply_threads).
    int32_t sync_apply_threads = 1;
    // Where tables with a memory budget keep their spill tier (one RocksDB
    // directory per table under it); empty: budgets are only reported.
    std::string spill_root;
    // Their tables' embedding::TableOptions.
    uint64_t spill_block_cache_bytes = uint64_t{64} << 20;
    bool spill_read_around = false;
    // The shards a table's keys are spread over: each commits memory for
    // ShardShare of a config's expected_rows. 0: none is committed (a
    // serving replica loads exactly a checkpoint's rows).
    int32_t num_shards = 1;
    // The most a table's expected_rows may commit here (its share's
    // embedding::ExpectedRowsBytes); RESOURCE_EXHAUSTED above, whichever
    // path creates the table (CreateTable, a checkpoint, a primary).
    uint64_t max_expected_rows_bytes = UINT64_MAX;
    // A serving replica's registry: each table holds its rows as its
    // config's serving.storage stores them (serving_storage.h), its spec's
    // dim the stored floats a row while its Entry's config keeps the
    // served dim. The configs given must have no optimizer state
    // (ValuesOnlyConfig). A table that does not spill is an
    // embedding::ValuesTable (a row costs its floats and its key).
    bool serving_rows = false;
  };

  TableRegistry() : TableRegistry(Options()) {}
  explicit TableRegistry(Options options) : options_(std::move(options)) {}

  // A shard's share of a table's expected_rows (TableConfig: the whole
  // table's) over `num_shards` shards: the rows its own Table expects.
  static uint64_t ShardShare(uint64_t expected_rows, int32_t num_shards) {
    const uint64_t shards = num_shards < 1 ? 1 : uint64_t(num_shards);
    return expected_rows / shards + (expected_rows % shards != 0);
  }

  // What a table of `spec` (the whole table's) commits here at creation
  // for its expected_rows. REQUIRES: ValidateTableSpec(spec) is OK.
  uint64_t ExpectedRowsBytesHere(const embedding::TableSpec& spec) const;

  struct CreateResult {
    uint32_t table_id;
    // False when a table of the same name and config already existed.
    bool created;
  };

  // Creates the table, or returns the existing one if a table of that name
  // has the same configuration (idempotent). FAILED_PRECONDITION if the
  // name exists with a different one; INVALID_ARGUMENT (naming the field)
  // for an invalid config; RESOURCE_EXHAUSTED if `max_tables` are held or
  // its expected_rows would commit more than max_expected_rows_bytes.
  // `at_id` (a replica catching up takes its primary's ids): the id the
  // table must have; FAILED_PRECONDITION if it is taken by another table or
  // below an id already given out. Default: the next id.
  static constexpr uint32_t kNextId = std::numeric_limits<uint32_t>::max();
  absl::StatusOr<CreateResult> Create(
      const proto::TableConfig& config,
      size_t max_tables = std::numeric_limits<size_t>::max(),
      uint32_t at_id = kNextId);

  // A table built aside (a checkpoint restored into it) that no call sees
  // until Install makes it, with others, part of the registry at once.
  // Dropped un-installed, it is freed and leaves nothing behind.
  class PreparedTable {
   public:
    embedding::Table& table() const { return *slot_->table; }
    // Every field explicit.
    const proto::TableConfig& config() const { return slot_->config; }

   private:
    friend class TableRegistry;
    explicit PreparedTable(std::shared_ptr<Slot> slot)
        : slot_(std::move(slot)) {}
    std::shared_ptr<Slot> slot_;
  };

  // Builds a table of `config` aside. The errors of Create's config checks
  // and of the table's creation; nothing in the registry changes.
  absl::StatusOr<std::unique_ptr<PreparedTable>> Prepare(
      const proto::TableConfig& config);

  // Makes every prepared table part of the registry, all or none: a table
  // whose name is new takes the next id; one whose name exists replaces
  // that table under its id, which must have the same spec (else
  // FAILED_PRECONDITION) and no rows (else FAILED_PRECONDITION: "already
  // has rows"). On an error nothing changed.
  absl::Status Install(std::vector<std::unique_ptr<PreparedTable>> tables);

  // Removes the table named `name` (NOT_FOUND if none) and returns its id.
  absl::StatusOr<uint32_t> Drop(const std::string& name);

  // Tables held now.
  size_t size() const;

  struct Entry {
    uint32_t table_id;
    embedding::Table* table;
    // Null for ASYNC tables.
    StepSynchronizer* synchronizer;
    // Every field explicit.
    const proto::TableConfig* config;
    // Keeps the above alive.
    std::shared_ptr<const void> hold;
  };

  // The table with `table_id`, or NOT_FOUND naming the known ids.
  absl::StatusOr<Entry> Find(uint32_t table_id) const;

  // The table named `name`, or NOT_FOUND.
  absl::StatusOr<Entry> FindByName(const std::string& name) const;

  // Every table, in id order.
  std::vector<Entry> List() const;

 private:
  // A table and what goes with it; its spill directory (one per table
  // built, never shared) is removed when it is freed.
  struct Slot {
    ~Slot();
    proto::TableConfig config;
    std::unique_ptr<embedding::Table> table;
    std::unique_ptr<StepSynchronizer> synchronizer;
    std::string spill_directory;
  };
  // The canonical config of `config` (every field explicit) and its spec.
  absl::StatusOr<std::pair<proto::TableConfig, embedding::TableSpec>> Canonical(
      const proto::TableConfig& config) const;
  // A table of the canonical config, with its synchronizer.
  absl::StatusOr<std::shared_ptr<Slot>> Build(proto::TableConfig canonical,
                                              const embedding::TableSpec& spec);
  // FAILED_PRECONDITION if `existing` and `requested` differ beyond
  // expected_rows (a hint, not part of the spec).
  static absl::Status SameSpec(const proto::TableConfig& existing,
                               const proto::TableConfig& requested);
  static Entry EntryOf(uint32_t id, const std::shared_ptr<Slot>& slot);

  const Options options_;
  // A shard's share of a config's expected_rows here (0 for a follower).
  uint64_t LocalExpectedRows(uint64_t expected_rows) const;

  // Held by Create throughout (creations one at a time); mu_ only while
  // the maps are read or changed.
  Mutex create_mu_;
  mutable Mutex mu_;
  // Index = table id; null once dropped.
  std::vector<std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> id_by_name_ ABSL_GUARDED_BY(mu_);
  // Numbers every table built, for its own spill directory.
  std::atomic<uint64_t> built_{0};
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_TABLE_REGISTRY_H_
