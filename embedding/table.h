// Table: the rows of one embedding table on one shard, in memory.
//
// Rows are created on first touch (as admission allows); keys are any
// uint64. Every operation is batched over spans: the table sorts a batch by
// lock stripe, takes each stripe's lock once per batch, and prefetches the
// index and rows ahead of use. Values and gradients are row-major:
// keys.size() rows of spec().dim floats.
//
// Memory layout (see docs/architecture.md): each stripe keeps rows in an
// arena of fixed-size chunks. A row is a 16-byte header (key, last touch,
// access count), the embedding, and the optimizer state, contiguous. The
// stripe's index is an absl::flat_hash_set of 4-byte slots (a 24-bit row id
// and an 8-bit fingerprint of the key's hash) whose equality compares
// fingerprints and then reads the key from the row, so a row costs 16 bytes
// of header plus about 5/load-factor bytes of index beyond its floats.
// Batched lookups find rows by fingerprint alone, fetch them, and check the
// key when they use it. A stripe holds at most 2^24 rows.
//
// Spill tier (TableOptions::spill_directory): rows beyond the memory budget
// live in RocksDB; a batch's misses are read with one MultiGet and promoted,
// and cold rows (CLOCK over a per-row reference bit) are written out in
// batches. Each key is in exactly one tier at any time a stripe lock is
// free. Optimizer state and metadata travel with the row.
//
// Thread safety: all methods are thread-safe. Operations on different
// stripes run in parallel; a batch is atomic per stripe, not as a whole.
#ifndef EMBEDPS_EMBEDDING_TABLE_H_
#define EMBEDPS_EMBEDDING_TABLE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "embedding/table_spec.h"

namespace embedps::embedding {

// What the caller knows about the request.
struct AccessContext {
  // The caller's training step; rows touched record it as their last touch
  // when the table's TTL counts steps. Default: 0.
  uint64_t step = 0;
};

struct TableOptions {
  // Wall clock for TTLs in seconds; tests pass a fake one.
  // Default: absl::Now.
  std::function<absl::Time()> clock = [] { return absl::Now(); };
  // Directory of the table's spill tier (a RocksDB instance; emptied when
  // the table is created). With a directory and a memory budget in the
  // spec, cold rows move there when the resident rows exceed the budget and
  // come back when touched. Empty: memory only, and the budget is only
  // reported (TableStats::over_budget). Default: empty.
  std::string spill_directory;
  // RocksDB block cache of the spill tier. Default: 64 MiB.
  uint64_t spill_block_cache_bytes = uint64_t{64} << 20;
  // Let the kernel read around each miss in the spill tier's files
  // (SpillStoreOptions::read_around). Default: false.
  bool spill_read_around = false;
};

// The uint64 statistics of a table, each named once: TableStats declares
// them, the server copies them into TableStatsProto (a field of the same
// name: a missing one does not compile) and renders them on /metrics.
//   X(field, Prometheus type, metric name, help)
#define EMBEDPS_TABLE_STATS_FIELDS(X)                                         \
  X(rows, "gauge", "embedps_table_rows",                                      \
    "Rows held (in memory and in the spill tier).")                           \
  X(resident_rows, "gauge", "embedps_table_resident_rows", "Rows in memory.") \
  X(spilled_rows, "gauge", "embedps_table_spilled_rows",                      \
    "Rows in the spill tier.")                                                \
  X(resident_bytes, "gauge", "embedps_table_resident_bytes",                  \
    "Bytes held: rows, index, free list, admission and frequency "            \
    "sketches, changes tracked for incremental snapshots.")                   \
  X(spill_memory_bytes, "gauge", "embedps_table_spill_memory_bytes",          \
    "Bytes the spill tier holds in memory: memtables and block cache "        \
    "(with index and filter blocks).")                                        \
  X(payload_bytes, "gauge", "embedps_table_payload_bytes",                    \
    "Bytes of embedding vectors and optimizer state.")                        \
  X(memory_budget_bytes, "gauge", "embedps_table_memory_budget_bytes",        \
    "Configured memory budget (0: none).")                                    \
  X(admitted, "counter", "embedps_rows_admitted_total",                       \
    "Rows created for admitted keys.")                                        \
  X(admission_rejected, "counter", "embedps_admission_rejected_total",        \
    "Pulls of keys without a row that admission did not admit (answered "     \
    "with the initial vector, nothing stored).")                              \
  X(pushes_dropped, "counter", "embedps_pushes_dropped_total",                \
    "Gradients for keys without a row, dropped.")                             \
  X(evicted, "counter", "embedps_rows_evicted_total",                         \
    "Rows removed by the TTL sweep or the max_rows cap.")                     \
  X(erased, "counter", "embedps_rows_erased_total", "Rows removed by Erase.") \
  X(pulled_keys, "counter", "embedps_keys_pulled_total",                      \
    "Keys in Pull requests.")                                                 \
  X(pushed_keys, "counter", "embedps_keys_pushed_total",                      \
    "Keys in Push requests applied.")                                         \
  X(looked_up_keys, "counter", "embedps_keys_looked_up_total",                \
    "Keys in read-only Lookup requests.")                                     \
  X(pull_requests, "counter", "embedps_table_pulls_total",                    \
    "Pull batches applied to the table.")                                     \
  X(push_requests, "counter", "embedps_table_pushes_total",                   \
    "Push batches applied to the table.")                                     \
  X(lookup_requests, "counter", "embedps_table_lookups_total",                \
    "Lookup batches served by the table.")                                    \
  X(spilled_disk_bytes, "gauge", "embedps_table_spilled_disk_bytes",          \
    "Bytes of the spill tier's files on disk.")                               \
  X(spills, "counter", "embedps_rows_spilled_total",                          \
    "Rows moved from memory to the spill tier.")                              \
  X(promotions, "counter", "embedps_rows_promoted_total",                     \
    "Rows moved from the spill tier back to memory.")                         \
  X(spills_of_unchanged_rows, "counter",                                      \
    "embedps_rows_spilled_unchanged_total",                                   \
    "Rows moved to the spill tier that it held unchanged (not rewritten; "    \
    "a table with a TTL writes their access metadata).")                      \
  X(spills_of_newcomers, "counter", "embedps_rows_spilled_newcomers_total",   \
    "Rows moved to the spill tier at the first eviction round after they "    \
    "came into memory (seen less often than the rows kept).")                 \
  X(spill_multigets, "counter", "embedps_spill_multiget_total",               \
    "Batched reads of the spill tier.")                                       \
  X(spill_multiget_keys, "counter", "embedps_spill_multiget_keys_total",      \
    "Keys in batched reads of the spill tier.")

// Counters since the table was created; a snapshot, summed over stripes.
// Field meanings: EMBEDPS_TABLE_STATS_FIELDS' help texts.
struct TableStats {
#define EMBEDPS_DECLARE_TABLE_STAT(field, type, metric, help) \
  uint64_t field = 0;
  EMBEDPS_TABLE_STATS_FIELDS(EMBEDPS_DECLARE_TABLE_STAT)
#undef EMBEDPS_DECLARE_TABLE_STAT
  // resident_bytes + spill_memory_bytes > memory_budget_bytes > 0.
  bool over_budget = false;
  // Time in batched reads of the spill tier.
  uint64_t spill_multiget_micros = 0;
};

// A point-in-time copy of a table for a checkpoint. Taking it is the only
// part that holds the table's locks; reading it afterwards does not.
class TableSnapshot {
 public:
  virtual ~TableSnapshot() = default;
  // True if it holds only the rows changed and the keys removed since the
  // previous snapshot of the same table.
  virtual bool incremental() const = 0;
  // Bytes of every record (RowRecordBytes of the table).
  virtual size_t record_bytes() const = 0;
  // Calls visit(key, record) for every row and visit(key, nullptr) for every
  // removed key, in increasing key order; stops at the first error.
  virtual absl::Status ForEach(
      absl::FunctionRef<absl::Status(uint64_t, const char*)> visit) const = 0;
  // State of the admission filter, one string per lock stripe (empty for
  // stateless filters).
  virtual const std::vector<std::string>& admission_states() const = 0;
  // Rows in memory that were copied while the table was paused.
  virtual uint64_t copied_rows() const = 0;
  // How long the table's locks were held to take it: the training pause.
  virtual absl::Duration pause() const = 0;
  // The lock stripe the table keeps `key` in (as Table::StripeOfKey).
  virtual uint32_t StripeOfKey(uint64_t key) const = 0;
};

// One row as Scan shows it. Valid only during the visit.
struct RowView {
  uint64_t key;
  absl::Span<const float> embedding;
  absl::Span<const float> optimizer_state;
  // Pulls of this row (saturating), and its last touch (step or seconds
  // since the table was created, per the TTL unit). In a spilling table
  // without a TTL both may lag: a row that leaves memory with its floats
  // unchanged keeps the metadata of its spill-tier copy.
  uint32_t access_count;
  uint32_t last_touch;
};

// Memory a table created from `spec` commits at once for its
// expected_rows (rows of the arena; the index comes on top, ~5 bytes a
// row): what a server admits before creating it. 0 without a hint.
// REQUIRES: ValidateTableSpec(spec) is OK.
uint64_t ExpectedRowsBytes(const TableSpec& spec);

class Table {
 public:
  // INVALID_ARGUMENT (naming the field) if ValidateTableSpec rejects `spec`;
  // RESOURCE_EXHAUSTED if the memory for spec.expected_rows is refused.
  static absl::StatusOr<std::unique_ptr<Table>> Create(
      const TableSpec& spec, TableOptions options = {});

  virtual ~Table() = default;

  virtual const TableSpec& spec() const = 0;

  // Writes the row of every key into `values`, creating rows for keys the
  // admission policy admits; a key not admitted gets its initial row and
  // nothing is stored. Duplicate keys are fine (each gets the row).
  // INVALID_ARGUMENT if values.size() != keys.size() * dim (nothing done).
  virtual absl::Status Pull(absl::Span<const uint64_t> keys,
                            absl::Span<float> values,
                            const AccessContext& context = {}) = 0;

  // Applies the optimizer to the row of every key. Gradients of duplicate
  // keys are summed (in batch order) and the optimizer is applied once per
  // distinct key. Gradients for keys without a row are dropped and counted,
  // except under AdmissionSpec::kAlways, which creates the row first.
  // INVALID_ARGUMENT, with nothing applied, if grads.size() !=
  // keys.size() * dim, if any gradient is NaN or infinite, or if an update
  // would make a row's embedding or optimizer state NaN or infinite (finite
  // but huge gradients): the rows updated before it are put back, except
  // those a concurrent Push updated meanwhile, and except where the Push
  // could not overflow a row by the bounds of embedding/internal/push_undo.h
  // (no gradient beyond 2^16, no value ever beyond 2^64) and still did:
  // there the earlier rows keep their update. The error says which.
  virtual absl::Status Push(absl::Span<const uint64_t> keys,
                            absl::Span<const float> grads,
                            const AccessContext& context = {}) = 0;

  // What Lookup writes for a key without a row.
  enum class MissingRows {
    kZeros,
    // The key's initial vector: what a Pull would have created (the
    // initializer is a pure function of the table's seed and the key).
    kInitialValues,
  };

  // Read-only: writes the row of each key that has one into `values` and
  // sets found[i]; a miss gets what `missing` says and found[i] = false.
  // Never creates a row or changes access metadata or admission counters.
  // Returns the number of keys found. INVALID_ARGUMENT if the sizes do not
  // match keys.size() (and ·dim).
  virtual absl::StatusOr<uint64_t> Lookup(absl::Span<const uint64_t> keys,
                                          absl::Span<float> values,
                                          absl::Span<bool> found,
                                          MissingRows missing) = 0;

  // Read-only, for a worker's hot-row tier: writes the record
  // (RowRecordBytes: last touch, access count, embedding, optimizer state)
  // of each key that has a row to records[i * record bytes] and sets
  // found[i]; a miss gets zeros and found[i] = false. Never creates a row
  // or changes anything. Returns the number of keys found.
  // INVALID_ARGUMENT if the sizes do not match keys.size().
  virtual absl::StatusOr<uint64_t> ReadRecords(absl::Span<const uint64_t> keys,
                                               absl::Span<char> records,
                                               absl::Span<bool> found) = 0;

  // The write-back of a worker's hot-row tier: the embedding and optimizer
  // state of every key that has a row become those of its record, and the
  // record's access count (the uses the tier served meanwhile) adds to the
  // row's, saturating; its last touch is ignored: the row counts as
  // touched by `context`, and as changed for incremental snapshots and the
  // change log. Never creates a row: a key without one (erased or evicted since
  // it was read) is skipped and written[i] stays false. Returns the rows
  // written. INVALID_ARGUMENT, with nothing written, if the sizes do not
  // match keys.size(), a key repeats, or a float is NaN or infinite.
  virtual absl::StatusOr<uint64_t> WriteRecords(
      absl::Span<const uint64_t> keys, absl::Span<const char> records,
      absl::Span<bool> written, const AccessContext& context = {}) = 0;

  // Removes the rows of `keys` (absent keys are ignored); returns how many
  // rows were removed.
  // Errors only from the spill tier.
  virtual absl::StatusOr<uint64_t> Erase(absl::Span<const uint64_t> keys) = 0;

  // Removes rows untouched for longer than the spec's TTL (none when TTL is
  // off), then, while the table holds more than the spec's max_rows (0: no
  // cap), the least recently touched rows. Holds each stripe's lock for at most
  // a few thousand rows at a time, so concurrent Pulls and Pushes proceed.
  // Returns rows removed. Spilled rows are swept too (one scan of the spill
  // tier for the TTL, two for the cap). Rows created during a sweep may
  // leave the table a little over the cap until the next one. Errors only
  // from the spill tier.
  virtual absl::StatusOr<uint64_t> SweepExpired() = 0;

  // Calls `visit` for every row, one lock stripe at a time, under that
  // stripe's lock: `visit` must not call into this table. Rows changed by
  // concurrent writers may be seen before or after the change; with a spill
  // tier, a row moving between tiers meanwhile may be seen twice or not at
  // all (checkpoints use TakeSnapshot, which is exact). Spilled rows come
  // after the resident ones. Errors only from reading the spill tier.
  virtual absl::Status Scan(
      absl::FunctionRef<void(const RowView&)> visit) const = 0;

  virtual TableStats Stats() const = 0;

  // Copies what a checkpoint needs: every row (full) or the rows changed
  // and the keys removed since the previous snapshot (incremental; the
  // first snapshot of a table is always full, and so is one after a
  // spilling table changed more keys than its budget lets it track:
  // TableSnapshot::incremental() says which). Pushes and Pulls wait while
  // the resident part is copied; rows in the spill tier are read later
  // from a RocksDB snapshot. Every snapshot starts a new change set.
  virtual absl::StatusOr<std::unique_ptr<TableSnapshot>> TakeSnapshot(
      bool incremental) = 0;

  // What RestoreRows may assume about its keys.
  enum class RestoredKeys {
    // Rows of some keys may exist: they are replaced.
    kMayExist,
    // None of the keys has a row (a full checkpoint file restored into a
    // table that holds none of its keys): spares a lookup of every key in
    // the spill tier.
    kNew,
  };

  // Checkpoint restore: stores records (RowRecordBytes each) for `keys`,
  // replacing rows that exist; the restored rows count as unchanged for the
  // next incremental snapshot. With a spill tier, rows beyond the budget go
  // straight to it. REQUIRES: distinct keys (as in a checkpoint file).
  // INVALID_ARGUMENT if the sizes disagree.
  virtual absl::Status RestoreRows(
      absl::Span<const uint64_t> keys, absl::Span<const char> records,
      RestoredKeys assume = RestoredKeys::kMayExist) = 0;

  // Checkpoint restore of a whole sorted table file (the format of
  // checkpoint/format.h: 8-byte big-endian keys to records; longer keys are
  // metadata, not rows) into a spilling table: the file joins the spill
  // tier as it is -- hard-linked where the file system allows, else copied;
  // the file itself is never changed. `keys` and `records`: the file's
  // first rows, in order (as many as the caller read, none is fine); they
  // move into memory while their stripe has room, every other row stays in
  // the spill tier. `rows_per_stripe`: how many of the file's rows each
  // lock stripe (StripeOfKey) holds, for the spill counts.
  // REQUIRES: the table holds none of the file's keys (rows that concurrent
  // Pulls create meanwhile stay as they are unless among `keys`).
  // FAILED_PRECONDITION without a spill tier; INVALID_ARGUMENT if the
  // shapes disagree; errors name the file.
  virtual absl::Status AdoptSpillFile(
      const std::string& path, absl::Span<const uint64_t> keys,
      absl::Span<const char> records,
      absl::Span<const uint64_t> rows_per_stripe) = 0;

  // Returns memory committed beyond the rows held to the OS: each stripe's
  // arena is committed in huge pages where the kernel allows, the last one
  // whole (up to 2 MiB a stripe past its rows, 128 MiB a table of 64
  // stripes). For a table that is done growing, e.g. a serving replica's
  // restored base; rows made later commit their pages again.
  virtual void ReleaseUnusedMemory() = 0;

  // The lock stripe `key` belongs to, in [0, spec().num_stripes).
  virtual uint32_t StripeOfKey(uint64_t key) const = 0;

  // True if the table has a spill tier.
  virtual bool spills() const = 0;

  // Starts logging the keys whose rows change — updated by a Push,
  // created, removed (Erase, TTL) or restored — for TakeChangedKeys. For a
  // training shard that publishes its changes to serving replicas.
  // Idempotent; the log cannot be turned off. Costs one atomic load per
  // changed row while off, a vector append per changed row while on.
  virtual void EnableChangeLog() = 0;

  // The distinct keys whose rows changed since the previous call (or since
  // EnableChangeLog), in increasing order; the log starts over. Every
  // change made before the call returns is in this result or an earlier
  // one, so values read after it are at least as new as the changes it
  // names. Empty while the log is off.
  virtual std::vector<uint64_t> TakeChangedKeys() = 0;

  // Checkpoint restore: merges saved admission states (one per stripe, as
  // TableSnapshot::admission_states) into the filters by saturating
  // addition, so states of several old shards combine into one.
  // INVALID_ARGUMENT if the shapes disagree.
  virtual absl::Status MergeAdmissionStates(
      const std::vector<std::string>& states) = 0;
};

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_TABLE_H_
