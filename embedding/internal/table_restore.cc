#include "embedding/internal/table_restore.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "embedding/internal/spill_policy.h"
#include "embedding/internal/stripe_batch.h"

namespace embedps::embedding_internal {
namespace {

// RestoreRows of new keys into a spilling table ingests an SST file from
// this many rows on (below, the rows go through the memtable).
constexpr size_t kMinRowsToIngest = 4096;

// The second step of both restores that go through the spill tier: rows
// whose records are there already move into memory while their stripe has
// room. The others count as spilled: the keys not placed, or, given
// `rows_per_stripe` (the spill tier holds that many rows of each stripe,
// `keys` among them), those counts less the rows placed.
absl::Status PlaceRowsOfSpillTier(
    TableCore& core, absl::Span<const uint64_t> keys,
    absl::Span<const char> records,
    absl::Span<const uint64_t> rows_per_stripe = {}) {
  BatchScratch& scratch = core.GroupByStripe(keys, ThreadScratch());
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    const uint32_t begin = scratch.group_begin[s];
    const uint32_t end = scratch.group_begin[s + 1];
    if (begin == end && rows_per_stripe.empty()) continue;
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    SpillState& spill = stripe.spill();
    // Lock-free reads that began before the rows reached the spill tier
    // look again.
    ++spill.generation;
    uint64_t placed = 0;
    for (uint32_t j = begin; j < end; ++j) {
      const uint32_t pos = scratch.order[j];
      const uint64_t key = keys[pos];
      if (!spill.removed_keys.empty()) spill.removed_keys.erase(key);
      RowId id = stripe.Find(KeyProbe{key, scratch.hashes[j]});
      if (id == kNoRow) {
        if (stripe.index().size() >= core.max_resident_per_stripe) continue;
        ASSIGN_OR_RETURN(id, stripe.AllocateRow(key, 0));
        stripe.IndexRow(id);
      }  // else created by a concurrent Pull: the restored row wins
      ++placed;
      std::memcpy(stripe.Record(id),
                  records.data() + static_cast<size_t>(pos) * core.record_bytes,
                  core.record_bytes);
      RowHeader& header = stripe.MutableHeader(id);
      header.access_word &= kCountMask;
      // The spill tier holds this very record.
      stripe.NoteCurrentSpillCopy(id, AccessMetadata(header));
    }
    if (core.change_log.load(std::memory_order_relaxed)) {
      for (uint32_t j = begin; j < end; ++j) {
        core.LogChange(stripe, keys[scratch.order[j]]);
      }
    }
    const uint64_t held =
        rows_per_stripe.empty() ? end - begin : rows_per_stripe[s];
    spill.spilled_rows += held - std::min(placed, held);
  }
  return absl::OkStatus();
}

// RestoreRows of many new keys into a spilling table: every row goes to
// the spill tier first, in one SST file ingested by RocksDB (sorted, no
// memtable; a checkpoint's rows arrive in key order, so the files do not
// overlap and need no compaction); then each stripe takes what fits in
// memory. The copies of the rows that became resident stay in RocksDB,
// stale-but-harmless like those of promoted rows (resident wins).
absl::Status RestoreNewRowsByIngesting(TableCore& core,
                                       absl::Span<const uint64_t> keys,
                                       absl::Span<const char> records) {
  const size_t record_bytes = core.record_bytes;
  // Sorted, flag-free records; a checkpoint file's batch already is.
  bool ready = true;
  for (size_t i = 0; ready && i < keys.size(); ++i) {
    uint32_t word;
    std::memcpy(&word, records.data() + i * record_bytes + 4, sizeof(word));
    ready = (word & ~kCountMask) == 0 && (i == 0 || keys[i - 1] < keys[i]);
  }
  std::vector<uint64_t> sorted_keys;
  std::vector<char> sorted_records;
  absl::Span<const uint64_t> ingest_keys = keys;
  const char* ingest_records = records.data();
  if (!ready) {
    std::vector<uint32_t> order(keys.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
    sorted_keys = KeysAt(keys, order);
    if (std::adjacent_find(sorted_keys.begin(), sorted_keys.end()) !=
        sorted_keys.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RestoreRows of table '", core.spec.name, "': repeated keys"));
    }
    sorted_records.reserve(records.size());
    for (uint32_t i : order) {
      AppendCleanRecord(records.data() + static_cast<size_t>(i) * record_bytes,
                        record_bytes, sorted_records);
    }
    ingest_keys = sorted_keys;
    ingest_records = sorted_records.data();
  }
  RETURN_IF_ERROR(core.spill->Ingest(ingest_keys, ingest_records));
  return PlaceRowsOfSpillTier(core, keys, records);
}

}  // namespace

absl::Status RestoreRows(TableCore& core, absl::Span<const uint64_t> keys,
                         absl::Span<const char> records,
                         embedding::Table::RestoredKeys assume) {
  const size_t record_bytes = core.record_bytes;
  if (records.size() != keys.size() * record_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RestoreRows of table '", core.spec.name, "': ", keys.size(),
        " keys need ", keys.size() * record_bytes, " bytes of records, got ",
        records.size()));
  }
  const bool keys_are_new = assume == embedding::Table::RestoredKeys::kNew;
  if (core.spill != nullptr && keys_are_new &&
      keys.size() >= kMinRowsToIngest) {
    return RestoreNewRowsByIngesting(core, keys, records);
  }
  BatchScratch& scratch = core.GroupByStripe(keys, ThreadScratch());
  std::vector<uint64_t> not_resident;
  for (uint32_t s = 0; s < core.num_stripes(); ++s) {
    const uint32_t begin = scratch.group_begin[s];
    const uint32_t end = scratch.group_begin[s + 1];
    if (begin == end) continue;
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    SpillState& spill = stripe.spill();
    SpillWrites writes;
    // Nothing ever spilled from this stripe: no need to look.
    const bool may_be_spilled =
        core.spill != nullptr && !keys_are_new &&
        (spill.spilled_rows > 0 || spill.generation > 0);
    if (may_be_spilled) {
      // Rows restored over spilled ones replace them.
      not_resident.clear();
      for (uint32_t j = begin; j < end; ++j) {
        const uint64_t key = keys[scratch.order[j]];
        if (stripe.Find(KeyProbe{key, scratch.hashes[j]}) == kNoRow) {
          not_resident.push_back(key);
        }
      }
      const std::vector<uint64_t> candidates = SortedUnique(not_resident);
      FetchedRows fetched(record_bytes);
      RETURN_IF_ERROR(fetched.Fetch(*core.spill, candidates));
      for (uint64_t key : candidates) {
        if (fetched.Find(key) == nullptr) continue;
        --spill.spilled_rows;
        spill.dirty_keys.erase(key);
      }
    }
    for (uint32_t j = begin; j < end; ++j) {
      const uint32_t pos = scratch.order[j];
      const uint64_t key = keys[pos];
      const char* record =
          records.data() + static_cast<size_t>(pos) * record_bytes;
      if (!spill.removed_keys.empty()) spill.removed_keys.erase(key);
      core.LogChange(stripe, key);
      RowId id = stripe.Find(KeyProbe{key, scratch.hashes[j]});
      if (id == kNoRow) {
        if (stripe.index().size() >= core.max_resident_per_stripe) {
          // The stripe is full: straight to the spill tier, in key order
          // (files are sorted), which RocksDB takes fastest.
          writes.put_keys.push_back(key);
          AppendCleanRecord(record, record_bytes, writes.put_records);
          ++spill.spilled_rows;
          continue;
        }
        ASSIGN_OR_RETURN(id, stripe.AllocateRow(key, 0));
        stripe.IndexRow(id);
      }
      std::memcpy(stripe.Record(id), record, record_bytes);
      stripe.MutableHeader(id).access_word &= kCountMask;
      stripe.ForgetSpillCopy(id);  // a spill-tier copy holds the old row
    }
    if (core.spill != nullptr)
      RETURN_IF_ERROR(SettleSpill(core, stripe, writes));
  }
  return absl::OkStatus();
}

absl::Status AdoptSpillFile(TableCore& core, const std::string& path,
                            absl::Span<const uint64_t> keys,
                            absl::Span<const char> records,
                            absl::Span<const uint64_t> rows_per_stripe) {
  if (core.spill == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("table '", core.spec.name,
                     "' has no spill tier to adopt '", path, "'"));
  }
  if (records.size() != keys.size() * core.record_bytes ||
      rows_per_stripe.size() != core.stripes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AdoptSpillFile of table '", core.spec.name, "': ", keys.size(),
        " keys with ", records.size(), " bytes of records (", core.record_bytes,
        " each) and row counts of ", rows_per_stripe.size(), " stripes (",
        core.stripes.size(), " here)"));
  }
  RETURN_IF_ERROR(core.spill->Adopt(path));
  return PlaceRowsOfSpillTier(core, keys, records, rows_per_stripe);
}

absl::Status MergeAdmissionStates(TableCore& core,
                                  const std::vector<std::string>& states) {
  if (states.size() != core.stripes.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table '", core.spec.name, "' has ", core.stripes.size(),
        " lock stripes but the saved admission state has ", states.size()));
  }
  for (size_t s = 0; s < core.stripes.size(); ++s) {
    Stripe& stripe = *core.stripes[s];
    MutexLock lock(&stripe.mu);
    RETURN_IF_ERROR(stripe.admission().MergeState(states[s]));
  }
  return absl::OkStatus();
}

}  // namespace embedps::embedding_internal
