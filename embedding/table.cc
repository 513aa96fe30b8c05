// Table::Create and MemoryTable, the one implementation: the orchestrator
// of a table's parts (embedding/internal/):
//
//   table_core      constants, lock stripes, spill tier, batch grouping
//   stripe          one stripe: rows, fingerprint index, locking
//   stripe_batch    a batch's Pull/Push/Lookup on one stripe, under its lock
//   batch_pipeline  the two passes: memory, then the misses' one MultiGet
//   spill_policy    the budget, CLOCK + TinyLFU eviction, spill writes
//   table_snapshot  the checkpoint copy (the training pause)
//   table_restore   checkpoint restore paths
//   row_removal     Erase and the TTL sweep
#include "embedding/table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/initializer.h"
#include "embedding/internal/batch_pipeline.h"
#include "embedding/internal/row_removal.h"
#include "embedding/internal/spill_policy.h"
#include "embedding/internal/spill_store.h"
#include "embedding/internal/stripe_batch.h"
#include "embedding/internal/table_core.h"
#include "embedding/internal/table_restore.h"
#include "embedding/internal/table_snapshot.h"
#include "embedding/optimizer.h"

namespace embedps::embedding {
namespace {

using embedding_internal::BatchScratch;
using embedding_internal::kCountMask;
using embedding_internal::KeyHash;
using embedding_internal::KeyProbe;
using embedding_internal::kFreeRowMark;
using embedding_internal::kHeaderFloats;
using embedding_internal::kNoRow;
using embedding_internal::MissPolicy;
using embedding_internal::PushUndoLog;
using embedding_internal::RowHeader;
using embedding_internal::RowId;
using embedding_internal::Scratch;
using embedding_internal::Stripe;
using embedding_internal::TableCore;
using embedding_internal::ThreadScratch;

class MemoryTable final : public Table {
 public:
  MemoryTable(const TableSpec& spec, TableOptions options,
              std::unique_ptr<embedding_internal::SpillStore> spill)
      : core_(spec, std::move(options), std::move(spill)) {}

  const TableSpec& spec() const override { return core_.spec; }

  // Table::Create, before the table is handed out.
  absl::Status CommitExpectedRows() { return core_.CommitExpectedRows(); }

  absl::Status Pull(absl::Span<const uint64_t> keys, absl::Span<float> values,
                    const AccessContext& context) override {
    const size_t dim = core_.dim;
    if (values.size() != keys.size() * dim) {
      return SizeMismatch("Pull", "values", keys.size(), values.size());
    }
    pull_requests_.fetch_add(1, std::memory_order_relaxed);
    pulled_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
    if (keys.empty()) return absl::OkStatus();
    const uint32_t touch = core_.Touch(context);
    BatchScratch& scratch = core_.GroupByStripe(keys, ThreadScratch());
    RETURN_IF_ERROR(embedding_internal::FirstPass(
        core_, scratch,
        [&](Stripe& stripe, uint32_t begin, uint32_t end,
            const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return embedding_internal::PullGroup(
              core_, stripe, keys, values, scratch, begin, end, touch, policy);
        }));
    if (core_.spill == nullptr || scratch.missed_positions.empty()) {
      return absl::OkStatus();
    }
    // Second pass: the keys without a resident row, with their spilled
    // rows read in one MultiGet.
    const std::vector<uint32_t> missed =
        embedding_internal::SortedMisses(scratch);
    const std::vector<uint64_t> miss_keys =
        embedding_internal::KeysAt(keys, missed);
    std::vector<float> miss_values(missed.size() * dim);
    RETURN_IF_ERROR(embedding_internal::ResolveMisses(
        core_, miss_keys, scratch.generation_seen,
        [&](Stripe& stripe, BatchScratch& sub, uint32_t begin, uint32_t end,
            const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return embedding_internal::PullGroup(core_, stripe, miss_keys,
                                               absl::MakeSpan(miss_values), sub,
                                               begin, end, touch, policy);
        }));
    for (size_t i = 0; i < missed.size(); ++i) {
      std::memcpy(values.data() + static_cast<size_t>(missed[i]) * dim,
                  miss_values.data() + i * dim, sizeof(float) * dim);
    }
    return absl::OkStatus();
  }

  absl::Status Push(absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads,
                    const AccessContext& context) override {
    const size_t dim = core_.dim;
    if (grads.size() != keys.size() * dim) {
      return SizeMismatch("Push", "gradients", keys.size(), grads.size());
    }
    ASSIGN_OR_RETURN(const bool large_gradients, CheckFinite(keys, grads));
    if (keys.empty()) {
      push_requests_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    thread_local PushUndoLog undo;
    undo.Reset(core_.dim + core_.state_floats,
               /*logged=*/large_gradients ||
                   core_.large_values.load(std::memory_order_relaxed));
    const absl::Status status = ApplyPush(keys, grads, context, undo);
    if (undo.saw_large_value()) {
      core_.large_values.store(true, std::memory_order_relaxed);
    }
    if (!undo.refused()) {
      push_requests_.fetch_add(1, std::memory_order_relaxed);
      pushed_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
      return status;
    }
    uint64_t not_restored = 0;
    if (undo.logged()) {
      ASSIGN_OR_RETURN(not_restored, undo.RollBack(core_));
    }
    return undo.RefusalStatus(core_.spec.name, not_restored);
  }

  absl::StatusOr<uint64_t> Lookup(absl::Span<const uint64_t> keys,
                                  absl::Span<float> values,
                                  absl::Span<bool> found,
                                  MissingRows missing) override {
    if (values.size() != keys.size() * core_.dim) {
      return SizeMismatch("Lookup", "values", keys.size(), values.size());
    }
    RETURN_IF_ERROR(CheckFoundFlags("Lookup", keys.size(), found.size()));
    lookup_requests_.fetch_add(1, std::memory_order_relaxed);
    looked_up_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
    ASSIGN_OR_RETURN(
        const uint64_t hits,
        ReadRows(keys,
                 {reinterpret_cast<char*>(values.data()),
                  embedding_internal::kRecordOffset, sizeof(float) * core_.dim},
                 found));
    if (missing == MissingRows::kInitialValues && hits < keys.size()) {
      const size_t dim = core_.dim;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (found[i]) continue;
        InitialRow(core_.spec.initializer, core_.spec.seed, keys[i],
                   values.subspan(i * dim, dim));
      }
    }
    return hits;
  }

  absl::StatusOr<uint64_t> ReadRecords(absl::Span<const uint64_t> keys,
                                       absl::Span<char> records,
                                       absl::Span<bool> found) override {
    const size_t record_bytes = core_.record_bytes;
    if (records.size() != keys.size() * record_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ReadRecords of table '", core_.spec.name, "': ", keys.size(),
          " keys need ", keys.size() * record_bytes, " bytes, got ",
          records.size()));
    }
    RETURN_IF_ERROR(CheckFoundFlags("ReadRecords", keys.size(), found.size()));
    ASSIGN_OR_RETURN(const uint64_t hits,
                     ReadRows(keys, {records.data(), 0, record_bytes}, found));
    for (size_t i = 0; i < keys.size(); ++i) {
      if (found[i]) {
        embedding_internal::ClearRecordFlags(records.data() + i * record_bytes);
      }
    }
    return hits;
  }

  absl::StatusOr<uint64_t> WriteRecords(absl::Span<const uint64_t> keys,
                                        absl::Span<const char> records,
                                        absl::Span<bool> written,
                                        const AccessContext& context) override {
    RETURN_IF_ERROR(CheckRecordsToWrite(keys, records, written));
    std::fill(written.begin(), written.end(), false);
    const uint32_t touch = core_.Touch(context);
    BatchScratch& scratch = core_.GroupByStripe(keys, ThreadScratch());
    RETURN_IF_ERROR(embedding_internal::FirstPass(
        core_, scratch,
        [&](Stripe& stripe, uint32_t begin, uint32_t end,
            const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return embedding_internal::WriteGroup(core_, stripe, keys, records,
                                                scratch, begin, end, touch,
                                                policy, written);
        }));
    if (core_.spill != nullptr && !scratch.missed_positions.empty()) {
      const std::vector<uint32_t> missed =
          embedding_internal::SortedMisses(scratch);
      const std::vector<uint64_t> miss_keys =
          embedding_internal::KeysAt(keys, missed);
      const std::vector<char> miss_records =
          embedding_internal::RowsAt(records, core_.record_bytes, missed);
      std::unique_ptr<bool[]> flags(new bool[missed.size()]());
      RETURN_IF_ERROR(embedding_internal::ResolveMisses(
          core_, miss_keys, scratch.generation_seen,
          [&](Stripe& stripe, BatchScratch& sub, uint32_t begin, uint32_t end,
              const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return embedding_internal::WriteGroup(
                core_, stripe, miss_keys, miss_records, sub, begin, end, touch,
                policy, absl::MakeSpan(flags.get(), missed.size()));
          }));
      for (size_t i = 0; i < missed.size(); ++i) {
        if (flags[i]) written[missed[i]] = true;
      }
    }
    return static_cast<uint64_t>(
        std::count(written.begin(), written.end(), true));
  }

  absl::StatusOr<uint64_t> Erase(absl::Span<const uint64_t> keys) override {
    return embedding_internal::EraseRows(core_, keys);
  }

  absl::StatusOr<uint64_t> SweepExpired() override {
    ASSIGN_OR_RETURN(const uint64_t expired,
                     embedding_internal::SweepExpiredRows(core_));
    ASSIGN_OR_RETURN(const uint64_t beyond_cap,
                     embedding_internal::EvictBeyondCap(core_));
    return expired + beyond_cap;
  }

  absl::Status Scan(
      absl::FunctionRef<void(const RowView&)> visit) const override {
    const int32_t dim = core_.dim;
    const int32_t state_floats = core_.state_floats;
    for (const auto& stripe_ptr : core_.stripes) {
      const Stripe& stripe = *stripe_ptr;
      for (RowId begin = 0;; begin += embedding_internal::kRowsPerLockHold) {
        ReaderMutexLock lock(&stripe.mu);
        const RowId end = std::min<RowId>(
            stripe.used_rows(), begin + embedding_internal::kRowsPerLockHold);
        if (begin >= end) break;
        for (RowId id = begin; id < end; ++id) {
          const RowHeader& header = stripe.Header(id);
          if (header.last_touch == kFreeRowMark) continue;
          const float* row = stripe.Row(id);
          visit(RowView{
              header.key, absl::MakeConstSpan(row + kHeaderFloats, dim),
              absl::MakeConstSpan(row + kHeaderFloats + dim, state_floats),
              header.access_word & kCountMask, header.last_touch});
        }
      }
    }
    if (core_.spill == nullptr) return absl::OkStatus();
    std::vector<float> floats(dim + state_floats);
    return core_.spill->NewReadView()->ForEach(
        [&](uint64_t key, const char* record) {
          {
            // A resident row's spill-tier copy is stale: skip it.
            const uint64_t hash = KeyHash(key);
            const Stripe& stripe = core_.StripeOf(hash);
            ReaderMutexLock lock(&stripe.mu);
            if (stripe.Find(KeyProbe{key, hash}) != kNoRow) {
              return absl::OkStatus();
            }
          }
          uint32_t word[2];
          std::memcpy(word, record, sizeof(word));
          std::memcpy(floats.data(), record + sizeof(word),
                      sizeof(float) * floats.size());
          visit(RowView{key, absl::MakeConstSpan(floats.data(), dim),
                        absl::MakeConstSpan(floats.data() + dim, state_floats),
                        word[1] & kCountMask, word[0]});
          return absl::OkStatus();
        });
  }

  TableStats Stats() const override {
    TableStats stats;
    for (const auto& stripe_ptr : core_.stripes) {
      const Stripe& stripe = *stripe_ptr;
      ReaderMutexLock lock(&stripe.mu);
      stats.resident_rows += stripe.index().size();
      stats.spilled_rows += stripe.spill().spilled_rows;
      stats.resident_bytes += stripe.ResidentBytes();
      const embedding_internal::StripeCounters& c = stripe.counters();
      stats.admitted += c.admitted;
      stats.admission_rejected += c.admission_rejected;
      stats.pushes_dropped += c.pushes_dropped;
      stats.evicted += c.evicted;
      stats.erased += c.erased;
      stats.spills += c.spills;
      stats.spills_of_unchanged_rows += c.spills_of_unchanged_rows;
      stats.spills_of_newcomers += c.spills_of_newcomers;
      stats.promotions += c.promotions;
    }
    stats.rows = stats.resident_rows + stats.spilled_rows;
    if (core_.spill != nullptr) {
      const embedding_internal::SpillStoreStats spill = core_.spill->Stats();
      stats.spilled_disk_bytes = core_.spill->DiskBytes();
      stats.spill_memory_bytes = core_.spill->MemoryBytes();
      stats.spill_multigets = spill.multiget_calls;
      stats.spill_multiget_keys = spill.multiget_keys;
      stats.spill_multiget_micros = spill.multiget_micros;
    }
    stats.resident_bytes +=
        sizeof(*this) + core_.stripes.size() * sizeof(Stripe);
    stats.payload_bytes =
        stats.rows * static_cast<uint64_t>(core_.dim + core_.state_floats) *
        sizeof(float);
    stats.memory_budget_bytes = core_.spec.memory_budget_bytes;
    stats.over_budget = core_.spec.memory_budget_bytes > 0 &&
                        stats.resident_bytes + stats.spill_memory_bytes >
                            core_.spec.memory_budget_bytes;
    stats.pulled_keys = pulled_keys_.load(std::memory_order_relaxed);
    stats.pushed_keys = pushed_keys_.load(std::memory_order_relaxed);
    stats.looked_up_keys = looked_up_keys_.load(std::memory_order_relaxed);
    stats.pull_requests = pull_requests_.load(std::memory_order_relaxed);
    stats.push_requests = push_requests_.load(std::memory_order_relaxed);
    stats.lookup_requests = lookup_requests_.load(std::memory_order_relaxed);
    return stats;
  }

  absl::StatusOr<std::unique_ptr<TableSnapshot>> TakeSnapshot(
      bool incremental) override {
    return embedding_internal::TakeTableSnapshot(core_, incremental);
  }

  absl::Status RestoreRows(absl::Span<const uint64_t> keys,
                           absl::Span<const char> records,
                           RestoredKeys assume) override {
    return embedding_internal::RestoreRows(core_, keys, records, assume);
  }

  absl::Status AdoptSpillFile(
      const std::string& path, absl::Span<const uint64_t> keys,
      absl::Span<const char> records,
      absl::Span<const uint64_t> rows_per_stripe) override {
    return embedding_internal::AdoptSpillFile(core_, path, keys, records,
                                              rows_per_stripe);
  }

  absl::Status MergeAdmissionStates(
      const std::vector<std::string>& states) override {
    return embedding_internal::MergeAdmissionStates(core_, states);
  }

  uint32_t StripeOfKey(uint64_t key) const override {
    return core_.StripeIndex(KeyHash(key));
  }

  void EnableChangeLog() override {
    core_.change_log.store(true, std::memory_order_relaxed);
  }

  std::vector<uint64_t> TakeChangedKeys() override {
    std::vector<uint64_t> keys;
    for (auto& stripe_ptr : core_.stripes) {
      Stripe& stripe = *stripe_ptr;
      MutexLock lock(&stripe.mu);
      std::vector<uint64_t>& changes = stripe.changes();
      keys.insert(keys.end(), changes.begin(), changes.end());
      changes.clear();
      if (changes.capacity() > 4096) changes.shrink_to_fit();
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    return keys;
  }

  bool spills() const override { return core_.spill != nullptr; }

  void ReleaseUnusedMemory() override {
    for (const auto& stripe : core_.stripes) {
      MutexLock lock(&stripe->mu);
      stripe->ReleaseUnusedArena();
    }
  }

 private:
  absl::Status SizeMismatch(absl::string_view op, absl::string_view what,
                            size_t keys, size_t floats) const {
    const size_t dim = core_.dim;
    return absl::InvalidArgumentError(absl::StrCat(
        op, " of table '", core_.spec.name, "': ", keys, " keys need ",
        keys * dim, " ", what, " (dim ", dim, "), got ", floats,
        floats % dim == 0 ? absl::StrCat(" (", floats / dim, " rows)")
                          : std::string(" (not a multiple of dim)")));
  }

  absl::Status CheckFoundFlags(absl::string_view op, size_t keys,
                               size_t flags) const {
    if (flags == keys) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(op, " of table '", core_.spec.name, "': ", keys,
                     " keys but room for ", flags, " found flags"));
  }

  // The pass over memory and, with a spill tier, the misses' pass of a
  // read-only Lookup or ReadRecords.
  absl::StatusOr<uint64_t> ReadRows(absl::Span<const uint64_t> keys,
                                    const embedding_internal::RowCopy& copy,
                                    absl::Span<bool> found) {
    uint64_t hits = 0;
    BatchScratch& scratch = core_.GroupByStripe(keys, ThreadScratch());
    const MissPolicy first_pass =
        embedding_internal::FirstPassPolicy(core_, scratch);
    for (uint32_t s = 0; s < core_.num_stripes(); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      const Stripe& stripe = *core_.stripes[s];
      ReaderMutexLock lock(&stripe.mu);
      embedding_internal::RecordGeneration(core_, scratch, stripe, s);
      hits += embedding_internal::LookupGroup(core_, stripe, keys, copy, found,
                                              scratch, begin, end, first_pass);
    }
    if (core_.spill != nullptr && !scratch.missed_positions.empty()) {
      ASSIGN_OR_RETURN(
          const uint64_t spilled_hits,
          embedding_internal::LookupSpilled(core_, keys, copy, found, scratch));
      hits += spilled_hits;
    }
    return hits;
  }

  // WriteRecords' refusals: sizes, repeated keys, floats that are not
  // finite.
  absl::Status CheckRecordsToWrite(absl::Span<const uint64_t> keys,
                                   absl::Span<const char> records,
                                   absl::Span<bool> written) const {
    const size_t record_bytes = core_.record_bytes;
    const std::string what =
        absl::StrCat("WriteRecords of table '", core_.spec.name, "'");
    if (records.size() != keys.size() * record_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": ", keys.size(), " keys need ", keys.size() * record_bytes,
          " bytes, got ", records.size()));
    }
    RETURN_IF_ERROR(
        CheckFoundFlags("WriteRecords", keys.size(), written.size()));
    std::vector<uint64_t> sorted(keys.begin(), keys.end());
    std::sort(sorted.begin(), sorted.end());
    if (auto it = std::adjacent_find(sorted.begin(), sorted.end());
        it != sorted.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": key ", *it, " repeats"));
    }
    const size_t floats = (record_bytes - 8) / sizeof(float);
    std::vector<float> row(floats);
    for (size_t i = 0; i < keys.size(); ++i) {
      std::memcpy(row.data(), records.data() + i * record_bytes + 8,
                  sizeof(float) * floats);
      if (!embedding_internal::AllFinite(row.data(), floats)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": the record of key ", keys[i],
            " holds a NaN or infinite float; nothing was written"));
      }
    }
    return absl::OkStatus();
  }

  // Push's two passes; every update is logged in `undo`, and a result
  // that is not finite stops them (the caller rolls back).
  absl::Status ApplyPush(absl::Span<const uint64_t> keys,
                         absl::Span<const float> grads,
                         const AccessContext& context, PushUndoLog& undo) {
    const size_t dim = core_.dim;
    const uint32_t touch = core_.Touch(context);
    BatchScratch& scratch = core_.GroupByStripe(keys, ThreadScratch());
    RETURN_IF_ERROR(embedding_internal::FirstPass(
        core_, scratch,
        [&](Stripe& stripe, uint32_t begin, uint32_t end,
            const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return embedding_internal::PushGroup(core_, stripe, keys, grads,
                                               scratch, begin, end, touch,
                                               policy, undo);
        }));
    if (core_.spill == nullptr || scratch.missed_positions.empty() ||
        undo.refused()) {
      return absl::OkStatus();
    }
    // Second pass, as in Pull. Positions stay in batch order, so repeated
    // keys sum their gradients in the same order as without a spill tier.
    const std::vector<uint32_t> missed =
        embedding_internal::SortedMisses(scratch);
    const std::vector<uint64_t> miss_keys =
        embedding_internal::KeysAt(keys, missed);
    const std::vector<float> miss_grads =
        embedding_internal::RowsAt(grads, dim, missed);
    return embedding_internal::ResolveMisses(
        core_, miss_keys, scratch.generation_seen,
        [&](Stripe& stripe, BatchScratch& sub, uint32_t begin, uint32_t end,
            const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return embedding_internal::PushGroup(core_, stripe, miss_keys,
                                               miss_grads, sub, begin, end,
                                               touch, policy, undo);
        });
  }

  // INVALID_ARGUMENT naming the first NaN or infinite gradient; else
  // whether any is beyond kLoggedGradientBits.
  absl::StatusOr<bool> CheckFinite(absl::Span<const uint64_t> keys,
                                   absl::Span<const float> grads) const {
    if (!embedding_internal::AnyBeyond(
            grads.data(), grads.size(),
            embedding_internal::kLoggedGradientBits)) {
      return false;
    }
    if (embedding_internal::AllFinite(grads.data(), grads.size())) return true;
    const size_t dim = core_.dim;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!std::isfinite(grads[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Push of table '", core_.spec.name, "': gradient of key ",
            keys[i / dim], " (batch position ", i / dim, ", element ", i % dim,
            ") is ", grads[i], "; the whole push is refused"));
      }
    }
    return true;
  }

  TableCore core_;
  std::atomic<uint64_t> pulled_keys_{0}, pushed_keys_{0}, looked_up_keys_{0};
  std::atomic<uint64_t> pull_requests_{0}, push_requests_{0},
      lookup_requests_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Table>> Table::Create(const TableSpec& spec,
                                                     TableOptions options) {
  RETURN_IF_ERROR(ValidateTableSpec(spec));
  if (!options.clock) {
    return absl::InvalidArgumentError("TableOptions.clock must not be empty");
  }
  std::unique_ptr<embedding_internal::SpillStore> spill;
  if (!options.spill_directory.empty() && spec.memory_budget_bytes > 0) {
    embedding_internal::SpillStoreOptions spill_options;
    spill_options.path = options.spill_directory;
    spill_options.record_bytes = RowRecordBytes(
        spec.dim, OptimizerStateFloats(spec.optimizer, spec.dim));
    const embedding_internal::SpillReserve reserve =
        embedding_internal::PlanSpillReserve(spec.memory_budget_bytes,
                                             options.spill_block_cache_bytes);
    spill_options.block_cache_bytes = reserve.block_cache_bytes;
    spill_options.memtable_bytes = reserve.memtable_bytes;
    spill_options.read_around = options.spill_read_around;
    ASSIGN_OR_RETURN(spill,
                     embedding_internal::SpillStore::Open(spill_options));
  }
  auto table =
      std::make_unique<MemoryTable>(spec, std::move(options), std::move(spill));
  RETURN_IF_ERROR(table->CommitExpectedRows());
  return table;
}

uint64_t ExpectedRowsBytes(const TableSpec& spec) {
  const uint64_t row_bytes =
      sizeof(float) *
      static_cast<uint64_t>(embedding_internal::ArenaRowFloats(
          spec.dim, OptimizerStateFloats(spec.optimizer, spec.dim)));
  const uint64_t bytes = embedding_internal::ExpectedRowsPerStripe(
                             spec, embedding_internal::kMaxRowsPerStripe) *
                         static_cast<uint64_t>(spec.num_stripes) * row_bytes;
  return spec.memory_budget_bytes > 0
             ? std::min(bytes, spec.memory_budget_bytes)
             : bytes;
}

}  // namespace embedps::embedding
