#include "embedding/table.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/numeric/bits.h"
#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "embedding/admission.h"
#include "embedding/initializer.h"
#include "embedding/internal/count_min_sketch.h"
#include "embedding/internal/huge_page_allocator.h"
#include "embedding/internal/row_arena.h"
#include "embedding/internal/row_index_hash.h"
#include "embedding/internal/spill_store.h"
#include "embedding/optimizer.h"

namespace embedps::embedding {
namespace {

using RowId = uint32_t;

// A row's last_touch holds this while the row is on the free list.
constexpr uint32_t kFreeRowMark = UINT32_MAX;
// Largest touch value a live row records.
constexpr uint32_t kMaxTouch = UINT32_MAX - 1;
// Rows the sweep and the scan handle per lock hold.
constexpr RowId kRowsPerLockHold = 4096;
// Row ids are uint32; this one means "no row".
constexpr RowId kNoRow = UINT32_MAX;
// Row ids fit in 24 bits: an index slot packs the id with an 8-bit key
// fingerprint into 4 bytes. 16.7M rows a stripe, 1.07 billion a table with
// the default 64 stripes (more stripes raise it).
constexpr uint64_t kMaxRowsPerStripe = uint64_t{1} << 24;
// How far ahead of use batched loops prefetch.
constexpr size_t kIndexPrefetchDistance = 16;
constexpr size_t kRowPrefetchDistance = 8;
// RestoreRows of new keys into a spilling table ingests an SST file from
// this many rows on (below, the rows go through the memtable).
constexpr size_t kMinRowsToIngest = 4096;

// The first 16 bytes of every row. Bytes 8.. of a row are its record
// (RowRecordBytes): the form it has in the spill tier and in checkpoints.
struct RowHeader {
  uint64_t key;
  uint32_t last_touch;
  // Pulls (saturating at kCountMask), kDirtyBit and kReferencedBit.
  uint32_t access_word;
};
constexpr uint32_t kCountMask = (uint32_t{1} << 30) - 1;
// Changed since the table's last snapshot (only resident rows carry it;
// spilled changed rows are listed in SpillState::dirty_keys).
constexpr uint32_t kDirtyBit = uint32_t{1} << 30;
// Touched since the CLOCK hand last passed the row.
constexpr uint32_t kReferencedBit = uint32_t{1} << 31;
constexpr size_t kRecordOffset = 8;

// Records outside memory (spill tier, checkpoints) carry the access count
// only: clears the flags of the record's access word, in place.
void ClearRecordFlags(char* record) {
  uint32_t word;
  std::memcpy(&word, record + 4, sizeof(word));
  word &= kCountMask;
  std::memcpy(record + 4, &word, sizeof(word));
}

// Appends a record to `out` with its flags cleared.
void AppendCleanRecord(const char* record, size_t record_bytes,
                       std::vector<char>& out) {
  const size_t at = out.size();
  out.insert(out.end(), record, record + record_bytes);
  ClearRecordFlags(out.data() + at);
}
static_assert(sizeof(RowHeader) == 16, "header must stay 16 bytes");

// A row's access metadata as the first 8 bytes of its record hold it (last
// touch, then the access count without flags), read as one integer.
uint64_t AccessMetadata(const RowHeader& header) {
  const uint32_t words[2] = {header.last_touch,
                             header.access_word & kCountMask};
  uint64_t metadata;
  std::memcpy(&metadata, words, sizeof(metadata));
  return metadata;
}
constexpr int32_t kHeaderFloats = sizeof(RowHeader) / sizeof(float);

uint64_t KeyHash(uint64_t key) { return embedding_internal::TableKeyHash(key); }

// Stripes take the hash's top bits; absl's index uses the low ones.
uint32_t StripeIndexOfHash(uint64_t hash, uint32_t stripe_mask) {
  return static_cast<uint32_t>(hash >> 52) & stripe_mask;
}

// A lookup key for the row index, with its hash computed once.
struct KeyProbe {
  uint64_t key;
  uint64_t hash;
};

inline void PrefetchRead(const void* p) { __builtin_prefetch(p, 0, 3); }
inline void PrefetchWrite(const void* p) { __builtin_prefetch(p, 1, 3); }

class Stripe;

// One slot of the row index, 4 bytes: the row's id (low 24 bits) and its
// key's 8-bit IndexFingerprint (high 8). A lookup compares fingerprints
// first and reads a row's header only when they are equal: nearly every
// other key in the probed group is told apart without touching its row.
struct IndexSlot {
  uint32_t bits;
  RowId id() const { return bits & 0xFFFFFF; }
  uint8_t fingerprint() const { return static_cast<uint8_t>(bits >> 24); }
};

IndexSlot MakeIndexSlot(RowId id, uint64_t hash) {
  return IndexSlot{
      id | (uint32_t{embedding_internal::IndexFingerprint(hash)} << 24)};
}

// A lookup that trusts the fingerprint: it finds a row whose key has the
// same fingerprint (and the same 7 bits absl keeps), without reading any
// row. The caller must compare the row's key before using it (a wrong row
// is found with a probability of about 2^-8 per other key in the probed
// groups whose 7 absl bits match, ~0.05% of lookups) and look the key up
// again with a KeyProbe if it differs.
struct FingerprintProbe {
  uint64_t hash;
};

// Hash and equality of the row index: a slot is hashed by the key in its
// row's header (only when the index grows), compared by fingerprint and
// then by that key.
struct RowHash {
  using is_transparent = void;
  const Stripe* stripe;
  size_t operator()(const IndexSlot& slot) const;
  size_t operator()(const KeyProbe& probe) const { return probe.hash; }
  size_t operator()(const FingerprintProbe& probe) const { return probe.hash; }
};

struct RowEq {
  using is_transparent = void;
  const Stripe* stripe;
  bool operator()(const IndexSlot& a, const IndexSlot& b) const {
    return a.bits == b.bits;
  }
  bool operator()(const KeyProbe& probe, const IndexSlot& slot) const;
  bool operator()(const IndexSlot& slot, const KeyProbe& probe) const {
    return (*this)(probe, slot);
  }
  bool operator()(const FingerprintProbe& probe, const IndexSlot& slot) const {
    return slot.fingerprint() ==
           embedding_internal::IndexFingerprint(probe.hash);
  }
  bool operator()(const IndexSlot& slot, const FingerprintProbe& probe) const {
    return (*this)(probe, slot);
  }
};

using RowIndex =
    absl::flat_hash_set<IndexSlot, RowHash, RowEq,
                        embedding_internal::HugePageAllocator<IndexSlot>>;

struct StripeCounters {
  uint64_t spills = 0;
  uint64_t spills_of_unchanged_rows = 0;
  uint64_t promotions = 0;
  uint64_t admitted = 0;
  uint64_t admission_rejected = 0;
  uint64_t pushes_dropped = 0;
  uint64_t evicted = 0;
  uint64_t erased = 0;
  // Spills at the first eviction round after the row came in.
  uint64_t spills_of_newcomers = 0;
};

// What a stripe knows of its keys outside memory and of its changes.
struct SpillState {
  // Bumped by every spill-tier write of this stripe's keys: a MultiGet made
  // without the lock is current iff the generation did not move meanwhile.
  uint64_t generation = 0;
  // Next row id the CLOCK hand inspects.
  RowId clock_hand = 0;
  uint64_t spilled_rows = 0;
  // Spilled rows changed since the last snapshot.
  absl::flat_hash_set<uint64_t> dirty_keys;
  // Keys removed since the last snapshot (kept once a snapshot was taken).
  absl::flat_hash_set<uint64_t> removed_keys;
  // Recent Pulls and Pushes of the stripe's keys (TinyLFU's frequency
  // sketch, by KeyHash): an eviction round keeps the rows seen more often.
  // Null without a spill tier.
  std::unique_ptr<embedding_internal::CountMinSketch> frequency;
  // Rows that entered memory (promoted or created) since the stripe's last
  // eviction round: they compete with the CLOCK's victims for their places.
  // Ids of rows freed since are skipped (MemoryTable::SelectVictims).
  std::vector<RowId> newcomers;
};

// One lock stripe: a mutex, the row index, the row arena and the admission
// filter of the keys whose hash selects it.
//
// Thread safety: everything but the constants is guarded by mu. Row ids stay
// valid until the row is freed, and rows are only freed under mu; row
// addresses are valid until the next AllocateRow (the arena may move).
class Stripe {
 public:
  Stripe(int32_t row_floats, std::unique_ptr<AdmissionFilter> admission)
      : arena_(static_cast<size_t>(row_floats) * sizeof(float)),
        index_(0, RowHash{this}, RowEq{this}),
        admission_(std::move(admission)) {}

  Stripe(const Stripe&) = delete;
  Stripe& operator=(const Stripe&) = delete;

  mutable Mutex mu;

  float* Row(RowId id) const {
    return reinterpret_cast<float*>(arena_.row(id));
  }
  const RowHeader& Header(RowId id) const {
    return *reinterpret_cast<const RowHeader*>(Row(id));
  }
  RowHeader& MutableHeader(RowId id) {
    return *reinterpret_cast<RowHeader*>(Row(id));
  }

  RowIndex& index() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return index_; }
  const RowIndex& index() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return index_;
  }
  AdmissionFilter& admission() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return *admission_;
  }
  StripeCounters& counters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return counters_;
  }
  SpillState& spill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return spill_; }
  const SpillState& spill() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return spill_;
  }
  const AdmissionFilter& admission() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return *admission_;
  }
  const StripeCounters& counters() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return counters_;
  }
  // Row ids handed out so far (live or free): ids are in [0, used_rows()).
  RowId used_rows() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return used_rows_; }

  // A row for `key`, not yet in the index; its header is written.
  // RESOURCE_EXHAUSTED if the arena cannot grow.
  absl::StatusOr<RowId> AllocateRow(uint64_t key, uint32_t touch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RowId id;
    if (!free_rows_.empty()) {
      id = free_rows_.back();
      free_rows_.pop_back();
    } else {
      if (used_rows_ >= kMaxRowsPerStripe) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "a lock stripe holds the maximum of ", kMaxRowsPerStripe, " rows"));
      }
      RETURN_IF_ERROR(arena_.Reserve(uint64_t{used_rows_} + 1));
      id = used_rows_++;
    }
    RowHeader& header = MutableHeader(id);
    header.key = key;
    header.last_touch = touch;
    header.access_word = 0;
    ForgetSpillCopy(id);
    return id;
  }

  // The spill tier holds a current copy of a resident row: the same
  // embedding and optimizer state, with access metadata `copy_metadata`
  // (AccessMetadata; the row's own may have moved on since). Evicting such
  // a row writes at most its metadata (MemoryTable::SettleSpill).
  void NoteCurrentSpillCopy(RowId id, uint64_t copy_metadata)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (spill_copy_metadata_.size() < used_rows_) {
      // Grown by an eighth, not doubled: the budget counts 9 bytes a row.
      if (spill_copy_metadata_.capacity() < used_rows_) {
        spill_copy_metadata_.reserve(used_rows_ + used_rows_ / 8);
      }
      spill_copy_metadata_.resize(used_rows_, kNoCurrentCopy);
    }
    spill_copy_metadata_[id] = copy_metadata;
  }
  // The row changed, or its copy was deleted.
  void ForgetSpillCopy(RowId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (id < spill_copy_metadata_.size()) {
      spill_copy_metadata_[id] = kNoCurrentCopy;
    }
  }
  // The access metadata of the row's current spill-tier copy, or
  // kNoCurrentCopy.
  uint64_t SpillCopyMetadata(RowId id) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return id < spill_copy_metadata_.size() ? spill_copy_metadata_[id]
                                            : kNoCurrentCopy;
  }
  // Not the metadata of any record: its last touch would be kFreeRowMark.
  static constexpr uint64_t kNoCurrentCopy = UINT64_MAX;

  // Puts a row whose header is written into the index.
  void IndexRow(RowId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    index_.insert(MakeIndexSlot(id, KeyHash(Header(id).key)));
  }

  // Removes a row that is in the index.
  void FreeRow(RowId id, uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RowHeader& header = MutableHeader(id);
    index_.erase(KeyProbe{header.key, hash});
    header.last_touch = kFreeRowMark;
    ForgetSpillCopy(id);
    free_rows_.push_back(id);
  }

  // Only while no other thread can see the stripe (construction).
  uint64_t AdmissionBytesUnlocked() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return admission_->bytes();
  }

  // Bytes of rows handed out (the arena's untouched tail is address space,
  // not memory), the index, the free list and the admission sketch.
  uint64_t ResidentBytes() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    // absl's index: one slot and one control byte per capacity, plus a
    // group's worth of cloned control bytes.
    const uint64_t index_bytes =
        index_.capacity() == 0
            ? 0
            : index_.capacity() * (sizeof(IndexSlot) + 1) + 16;
    const uint64_t row_bytes =
        uint64_t{used_rows_} *
        (arena_.reserved_bytes() / std::max<uint64_t>(arena_.capacity(), 1));
    const uint64_t frequency_bytes =
        spill_.frequency == nullptr
            ? 0
            : spill_.frequency->bytes() +
                  spill_.newcomers.capacity() * sizeof(RowId);
    return row_bytes + index_bytes + free_rows_.capacity() * sizeof(RowId) +
           spill_copy_metadata_.capacity() * sizeof(uint64_t) +
           admission_->bytes() + frequency_bytes;
  }

 private:
  embedding_internal::RowArena arena_ ABSL_GUARDED_BY(mu);
  RowIndex index_ ABSL_GUARDED_BY(mu);
  RowId used_rows_ ABSL_GUARDED_BY(mu) = 0;
  std::vector<RowId> free_rows_ ABSL_GUARDED_BY(mu);
  // By row id (see NoteCurrentSpillCopy); empty until a row has a copy.
  std::vector<uint64_t> spill_copy_metadata_ ABSL_GUARDED_BY(mu);
  std::unique_ptr<AdmissionFilter> admission_ ABSL_GUARDED_BY(mu);
  StripeCounters counters_ ABSL_GUARDED_BY(mu);
  SpillState spill_ ABSL_GUARDED_BY(mu);
};

size_t RowHash::operator()(const IndexSlot& slot) const {
  return KeyHash(stripe->Header(slot.id()).key);
}

bool RowEq::operator()(const KeyProbe& probe, const IndexSlot& slot) const {
  return slot.fingerprint() ==
             embedding_internal::IndexFingerprint(probe.hash) &&
         stripe->Header(slot.id()).key == probe.key;
}

// Per-thread scratch of one batch: the batch's keys grouped by stripe.
struct BatchScratch {
  std::vector<uint64_t> position_hashes;  // KeyHash of keys[i]
  std::vector<uint32_t> order;            // batch positions, grouped by stripe
  std::vector<uint64_t> hashes;           // KeyHash of keys[order[j]]
  std::vector<uint32_t> group_begin;      // stripe s: [group_begin[s], [s+1])
  std::vector<uint32_t> cursor;           // counting-sort insertion points
  std::vector<RowId> rows;                // row id per grouped position
  // Bitmaps over a stripe's row ids, for finding duplicates in a Push.
  // All zero between uses.
  std::vector<uint64_t> seen_rows;
  std::vector<uint64_t> repeated_rows;
  // Push: summed gradients of rows named more than once, by slot.
  absl::flat_hash_map<RowId, uint32_t> repeated_slot;
  std::vector<float> repeated_sums;
  std::vector<int32_t> deferred;  // stripes whose lock was busy
  // Spill tier: batch positions left for the second pass, and each
  // stripe's SpillState::generation when the first pass saw it.
  std::vector<uint32_t> missed_positions;
  std::vector<uint64_t> generation_seen;
};

// `which` 0 serves a request's batch, 1 its second pass over the misses.
BatchScratch& ThreadScratch(int which = 0) {
  thread_local BatchScratch scratch[2];
  return scratch[which];
}

// Rows read from the spill tier for one request: key -> record.
class FetchedRows {
 public:
  explicit FetchedRows(size_t record_bytes) : record_bytes_(record_bytes) {}

  // Reads `keys` (distinct) in one MultiGet; found ones replace what was
  // fetched before, missing ones are forgotten.
  absl::Status Fetch(embedding_internal::SpillStore& store,
                     absl::Span<const uint64_t> keys) {
    if (keys.empty()) return absl::OkStatus();
    const size_t base = records_.size();
    records_.resize(base + keys.size() * record_bytes_);
    found_.assign(keys.size(), false);
    bool* found = reinterpret_cast<bool*>(found_.data());
    RETURN_IF_ERROR(store.MultiGet(keys, records_.data() + base,
                                   absl::MakeSpan(found, keys.size())));
    for (size_t i = 0; i < keys.size(); ++i) {
      if (found[i]) {
        offset_[keys[i]] = base + i * record_bytes_;
      } else {
        offset_.erase(keys[i]);
      }
    }
    return absl::OkStatus();
  }

  // The record of `key`, or null if it is not spilled.
  const char* Find(uint64_t key) const {
    auto it = offset_.find(key);
    return it == offset_.end() ? nullptr : records_.data() + it->second;
  }

 private:
  const size_t record_bytes_;
  std::vector<char> records_;
  std::vector<char> found_;  // bools; std::vector<bool> has no data()
  absl::flat_hash_map<uint64_t, size_t> offset_;
};

// Spill-tier writes one stripe collects under its lock.
struct SpillWrites {
  std::vector<uint64_t> put_keys;
  std::vector<char> put_records;
  std::vector<uint64_t> delete_keys;
  // Rows whose spill-tier copy is current but for its access metadata.
  std::vector<uint64_t> metadata_keys;
  std::vector<uint64_t> access_metadata;  // AccessMetadata, by metadata_keys
  bool empty() const {
    return put_keys.empty() && delete_keys.empty() && metadata_keys.empty();
  }
  void clear() {
    put_keys.clear();
    put_records.clear();
    delete_keys.clear();
    metadata_keys.clear();
    access_metadata.clear();
  }
};

// How a pass over a stripe's batch treats keys without a resident row.
struct MissPolicy {
  // First pass with a spill tier: record the batch position here and leave
  // the key for the second pass.
  std::vector<uint32_t>* defer = nullptr;
  // Second pass: spilled rows to promote.
  const FetchedRows* fetched = nullptr;
};

// Distinct keys of `keys`, sorted.
std::vector<uint64_t> SortedUnique(absl::Span<const uint64_t> keys) {
  std::vector<uint64_t> unique(keys.begin(), keys.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  return unique;
}

// What TakeSnapshot copied: resident rows (and removed keys) sorted by key,
// plus, with a spill tier, a RocksDB snapshot for the spilled rows (all of
// them for a full snapshot, the changed ones for an incremental one).
class CopiedSnapshot final : public TableSnapshot {
 public:
  struct Entry {
    uint64_t key;
    // Into records; kRemoved for a removed key.
    size_t offset;
  };
  static constexpr size_t kRemoved = SIZE_MAX;

  CopiedSnapshot(bool incremental, size_t record_bytes, uint32_t stripe_mask)
      : incremental_(incremental),
        record_bytes_(record_bytes),
        stripe_mask_(stripe_mask) {}

  uint32_t StripeOfKey(uint64_t key) const override {
    return StripeIndexOfHash(KeyHash(key), stripe_mask_);
  }

  bool incremental() const override { return incremental_; }
  size_t record_bytes() const override { return record_bytes_; }
  const std::vector<std::string>& admission_states() const override {
    return admission_states_;
  }
  uint64_t copied_rows() const override { return copied_rows_; }
  absl::Duration pause() const override { return pause_; }

  absl::Status ForEach(absl::FunctionRef<absl::Status(uint64_t, const char*)>
                           visit) const override {
    size_t next = 0;
    const auto emit_until = [&](uint64_t bound, bool inclusive) {
      while (next < entries_.size() &&
             (entries_[next].key < bound ||
              (inclusive && entries_[next].key == bound))) {
        const Entry& entry = entries_[next++];
        RETURN_IF_ERROR(visit(entry.key, entry.offset == kRemoved
                                             ? nullptr
                                             : records_.data() + entry.offset));
      }
      return absl::OkStatus();
    };
    if (spill_view_ != nullptr && !incremental_) {
      // Tiers hold disjoint keys: merge the two sorted streams.
      std::vector<char> clean(record_bytes_);
      RETURN_IF_ERROR(spill_view_->ForEach(
          [&](uint64_t key, const char* record) -> absl::Status {
            RETURN_IF_ERROR(emit_until(key, false));
            // A resident row's spill-tier copy is stale: memory wins.
            if (next < entries_.size() && entries_[next].key == key) {
              return absl::OkStatus();
            }
            return visit(key, CleanRecord(record, clean.data()));
          }));
    }
    return emit_until(UINT64_MAX, true);
  }

  // Filled by the table while it is paused, then sorted by Finish.
  std::vector<Entry> entries_;
  std::vector<char> records_;
  std::vector<std::string> admission_states_;
  std::unique_ptr<embedding_internal::SpillStore::ReadView> spill_view_;
  uint64_t copied_rows_ = 0;
  absl::Duration pause_;

  void Reserve(size_t rows) {
    entries_.reserve(rows);
    records_.reserve(rows * record_bytes_);
  }

  // Appends a record (its access word stripped of flags).
  void AddRecord(uint64_t key, const char* record) {
    entries_.push_back(Entry{key, records_.size()});
    AppendCleanRecord(record, record_bytes_, records_);
  }

  // After the pause: reads the changed spilled rows (incremental) and
  // sorts everything by key.
  absl::Status Finish(absl::Span<const uint64_t> spilled_dirty_keys) {
    if (!spilled_dirty_keys.empty()) {
      std::vector<char> fetched(spilled_dirty_keys.size() * record_bytes_);
      std::unique_ptr<bool[]> found(new bool[spilled_dirty_keys.size()]());
      RETURN_IF_ERROR(spill_view_->MultiGet(
          spilled_dirty_keys, fetched.data(),
          absl::MakeSpan(found.get(), spilled_dirty_keys.size())));
      for (size_t i = 0; i < spilled_dirty_keys.size(); ++i) {
        if (found[i]) {
          AddRecord(spilled_dirty_keys[i], fetched.data() + i * record_bytes_);
        }
      }
    }
    std::sort(entries_.begin(), entries_.end(),
              [](const Entry& a, const Entry& b) { return a.key < b.key; });
    return absl::OkStatus();
  }

 private:
  const char* CleanRecord(const char* record, char* out) const {
    std::memcpy(out, record, record_bytes_);
    ClearRecordFlags(out);
    return out;
  }

  const bool incremental_;
  const size_t record_bytes_;
  const uint32_t stripe_mask_;
};

class MemoryTable final : public Table {
 public:
  MemoryTable(const TableSpec& spec, TableOptions options,
              std::unique_ptr<embedding_internal::SpillStore> spill)
      : spec_(spec),
        options_(std::move(options)),
        dim_(spec.dim),
        optimizer_(RowOptimizer::Create(spec.optimizer, spec.dim)),
        state_floats_(optimizer_->state_floats()),
        row_floats_(RoundUp4(kHeaderFloats + dim_ + state_floats_)),
        stripe_mask_(static_cast<uint32_t>(spec.num_stripes - 1)),
        record_bytes_(RowRecordBytes(dim_, state_floats_)),
        epoch_(options_.clock()),
        spill_(std::move(spill)) {
    stripes_.reserve(spec.num_stripes);
    for (int32_t s = 0; s < spec.num_stripes; ++s) {
      stripes_.push_back(std::make_unique<Stripe>(
          row_floats_,
          AdmissionFilter::Create(spec.admission, MixPair(spec.seed, s),
                                  spec.num_stripes)));
    }
    if (spill_ != nullptr) {
      // The budget covers rows, their index slots (5 bytes over a load
      // factor of at least 7/16) and their spill copies' metadata (8 bytes,
      // an eighth spare: Stripe::NoteCurrentSpillCopy); each stripe gets an
      // equal share, less its admission and frequency sketches.
      const uint64_t per_stripe = spec.memory_budget_bytes / spec.num_stripes;
      const uint64_t admission = stripes_[0]->AdmissionBytesUnlocked();
      const uint64_t row_cost = sizeof(float) * row_floats_ + 12 + 9;
      const auto rows_in = [&](uint64_t other_bytes) {
        return std::max<uint64_t>(1, per_stripe > other_bytes
                                         ? (per_stripe - other_bytes) / row_cost
                                         : 0);
      };
      // The frequency sketch: 1-2 counters a resident row in each of its
      // 4 rows (4-8 bytes a resident row), aged after 10 sightings a
      // resident row (TinyLFU's sample).
      // Simulated (by hand) on the Zipf benchmark: wider or longer-lived
      // sketches keep no better rows (docs/architecture.md).
      const uint64_t width =
          std::max<uint64_t>(64, absl::bit_floor(2 * rows_in(admission)));
      const uint64_t frequency_bytes =
          embedding_internal::CountMinSketch::kDepth * width;
      max_resident_per_stripe_ = rows_in(admission + frequency_bytes);
      for (auto& stripe : stripes_) {
        MutexLock lock(&stripe->mu);
        stripe->spill().frequency =
            std::make_unique<embedding_internal::CountMinSketch>(
                width, 10 * max_resident_per_stripe_);
      }
    }
  }

  const TableSpec& spec() const override { return spec_; }

  absl::Status Pull(absl::Span<const uint64_t> keys, absl::Span<float> values,
                    const AccessContext& context) override {
    if (values.size() != keys.size() * dim_) {
      return SizeMismatch("Pull", "values", keys.size(), values.size());
    }
    pull_requests_.fetch_add(1, std::memory_order_relaxed);
    pulled_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
    if (keys.empty()) return absl::OkStatus();
    const uint32_t touch = Touch(context);
    BatchScratch& scratch = GroupByStripe(keys, ThreadScratch(0));
    RETURN_IF_ERROR(FirstPass(
        scratch, [&](Stripe& stripe, uint32_t begin, uint32_t end,
                     const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return PullGroup(stripe, keys, values, scratch, begin, end, touch,
                           policy);
        }));
    if (spill_ == nullptr || scratch.missed_positions.empty()) {
      return absl::OkStatus();
    }
    // Second pass: the keys without a resident row, with their spilled
    // rows read in one MultiGet.
    const std::vector<uint32_t> missed = SortedMisses(scratch);
    const std::vector<uint64_t> miss_keys = KeysAt(keys, missed);
    std::vector<float> miss_values(missed.size() * dim_);
    RETURN_IF_ERROR(ResolveMisses(
        miss_keys, scratch.generation_seen,
        [&](Stripe& stripe, BatchScratch& sub, uint32_t begin, uint32_t end,
            const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return PullGroup(stripe, miss_keys, absl::MakeSpan(miss_values), sub,
                           begin, end, touch, policy);
        }));
    for (size_t i = 0; i < missed.size(); ++i) {
      std::memcpy(values.data() + static_cast<size_t>(missed[i]) * dim_,
                  miss_values.data() + i * dim_, sizeof(float) * dim_);
    }
    return absl::OkStatus();
  }

  absl::Status Push(absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads,
                    const AccessContext& context) override {
    if (grads.size() != keys.size() * dim_) {
      return SizeMismatch("Push", "gradients", keys.size(), grads.size());
    }
    RETURN_IF_ERROR(CheckFinite(keys, grads));
    push_requests_.fetch_add(1, std::memory_order_relaxed);
    pushed_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
    if (keys.empty()) return absl::OkStatus();
    const uint32_t touch = Touch(context);
    BatchScratch& scratch = GroupByStripe(keys, ThreadScratch(0));
    RETURN_IF_ERROR(FirstPass(
        scratch, [&](Stripe& stripe, uint32_t begin, uint32_t end,
                     const MissPolicy& policy) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return PushGroup(stripe, keys, grads, scratch, begin, end, touch,
                           policy);
        }));
    if (spill_ == nullptr || scratch.missed_positions.empty()) {
      return absl::OkStatus();
    }
    // Second pass, as in Pull. Positions stay in batch order, so repeated
    // keys sum their gradients in the same order as without a spill tier.
    const std::vector<uint32_t> missed = SortedMisses(scratch);
    const std::vector<uint64_t> miss_keys = KeysAt(keys, missed);
    std::vector<float> miss_grads(missed.size() * dim_);
    for (size_t i = 0; i < missed.size(); ++i) {
      std::memcpy(miss_grads.data() + i * dim_,
                  grads.data() + static_cast<size_t>(missed[i]) * dim_,
                  sizeof(float) * dim_);
    }
    return ResolveMisses(miss_keys, scratch.generation_seen,
                         [&](Stripe& stripe, BatchScratch& sub, uint32_t begin,
                             uint32_t end, const MissPolicy& policy)
                             ABSL_NO_THREAD_SAFETY_ANALYSIS {
                               return PushGroup(stripe, miss_keys, miss_grads,
                                                sub, begin, end, touch, policy);
                             });
  }

  absl::StatusOr<uint64_t> Lookup(absl::Span<const uint64_t> keys,
                                  absl::Span<float> values,
                                  absl::Span<bool> found) override {
    if (values.size() != keys.size() * dim_) {
      return SizeMismatch("Lookup", "values", keys.size(), values.size());
    }
    if (found.size() != keys.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Lookup of table '", spec_.name, "': ", keys.size(),
                       " keys but room for ", found.size(), " found flags"));
    }
    lookup_requests_.fetch_add(1, std::memory_order_relaxed);
    looked_up_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
    uint64_t hits = 0;
    BatchScratch& scratch = GroupByStripe(keys, ThreadScratch(0));
    const MissPolicy first_pass = FirstPassPolicy(scratch);
    for (int32_t s = 0; s < static_cast<int32_t>(stripes_.size()); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      const Stripe& stripe = *stripes_[s];
      ReaderMutexLock lock(&stripe.mu);
      RecordGeneration(scratch, stripe, s);
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t pos = scratch.order[j];
        float* out = values.data() + static_cast<size_t>(pos) * dim_;
        auto it = stripe.index().find(KeyProbe{keys[pos], scratch.hashes[j]},
                                      scratch.hashes[j]);
        found[pos] = it != stripe.index().end();
        if (found[pos]) {
          std::memcpy(out, stripe.Row(it->id()) + kHeaderFloats,
                      sizeof(float) * dim_);
          ++hits;
        } else {
          std::fill(out, out + dim_, 0.0f);
          if (first_pass.defer != nullptr) first_pass.defer->push_back(pos);
        }
      }
    }
    if (spill_ == nullptr || scratch.missed_positions.empty()) return hits;
    ASSIGN_OR_RETURN(const uint64_t spilled_hits,
                     LookupSpilled(keys, values, found, scratch));
    return hits + spilled_hits;
  }

  absl::StatusOr<uint64_t> Erase(absl::Span<const uint64_t> keys) override {
    BatchScratch& scratch = GroupByStripe(keys, ThreadScratch(0));
    uint64_t erased = 0;
    std::vector<uint64_t> not_resident;
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      not_resident.clear();
      SpillWrites writes;
      for (uint32_t j = begin; j < end; ++j) {
        const uint64_t key = keys[scratch.order[j]];
        auto it = stripe.index().find(KeyProbe{key, scratch.hashes[j]},
                                      scratch.hashes[j]);
        if (it == stripe.index().end()) {
          not_resident.push_back(key);
          continue;
        }
        // A stale spill-tier copy must not bring the row back.
        if (spill_ != nullptr) writes.delete_keys.push_back(key);
        stripe.FreeRow(it->id(), scratch.hashes[j]);
        NoteRemoved(stripe, key);
        ++stripe.counters().erased;
        ++erased;
      }
      if (spill_ == nullptr) continue;
      // Spilled rows: found with one MultiGet under the lock, deleted in
      // one batch.
      const std::vector<uint64_t> candidates = SortedUnique(not_resident);
      FetchedRows fetched(record_bytes_);
      RETURN_IF_ERROR(fetched.Fetch(*spill_, candidates));
      for (uint64_t key : candidates) {
        if (fetched.Find(key) == nullptr) continue;
        writes.delete_keys.push_back(key);
        --stripe.spill().spilled_rows;
        stripe.spill().dirty_keys.erase(key);
        NoteRemoved(stripe, key);
        ++stripe.counters().erased;
        ++erased;
      }
      RETURN_IF_ERROR(SettleSpill(stripe, writes));
    }
    return erased;
  }

  absl::StatusOr<uint64_t> SweepExpired() override {
    if (spec_.eviction.ttl == 0) return 0;
    const uint64_t now =
        spec_.eviction.ttl_unit == EvictionSpec::TtlUnit::kSteps
            ? latest_step_.load(std::memory_order_relaxed)
            : SecondsSinceEpoch();
    uint64_t evicted = 0;
    for (auto& stripe_ptr : stripes_) {
      Stripe& stripe = *stripe_ptr;
      for (RowId begin = 0;; begin += kRowsPerLockHold) {
        MutexLock lock(&stripe.mu);
        const RowId end =
            std::min<RowId>(stripe.used_rows(), begin + kRowsPerLockHold);
        if (begin >= end) break;
        SpillWrites writes;
        for (RowId id = begin; id < end; ++id) {
          const RowHeader& header = stripe.Header(id);
          if (header.last_touch == kFreeRowMark) continue;
          if (Expired(header.last_touch, now)) {
            NoteRemoved(stripe, header.key);
            // A stale spill-tier copy must not bring the row back.
            if (spill_ != nullptr) writes.delete_keys.push_back(header.key);
            stripe.FreeRow(id, KeyHash(header.key));
            ++stripe.counters().evicted;
            ++evicted;
          }
        }
        if (!writes.empty()) {
          RETURN_IF_ERROR(spill_->Write({}, nullptr, writes.delete_keys));
          ++stripe.spill().generation;
        }
      }
    }
    if (spill_ != nullptr) {
      absl::StatusOr<uint64_t> spilled = SweepSpilled(now);
      if (!spilled.ok()) return spilled.status();
      evicted += *spilled;
    }
    return evicted;
  }

  absl::Status Scan(
      absl::FunctionRef<void(const RowView&)> visit) const override {
    for (const auto& stripe_ptr : stripes_) {
      const Stripe& stripe = *stripe_ptr;
      for (RowId begin = 0;; begin += kRowsPerLockHold) {
        ReaderMutexLock lock(&stripe.mu);
        const RowId end =
            std::min<RowId>(stripe.used_rows(), begin + kRowsPerLockHold);
        if (begin >= end) break;
        for (RowId id = begin; id < end; ++id) {
          const RowHeader& header = stripe.Header(id);
          if (header.last_touch == kFreeRowMark) continue;
          const float* row = stripe.Row(id);
          visit(RowView{
              header.key, absl::MakeConstSpan(row + kHeaderFloats, dim_),
              absl::MakeConstSpan(row + kHeaderFloats + dim_, state_floats_),
              header.access_word & kCountMask, header.last_touch});
        }
      }
    }
    if (spill_ == nullptr) return absl::OkStatus();
    std::vector<float> floats(dim_ + state_floats_);
    return spill_->NewReadView()->ForEach([&](uint64_t key,
                                              const char* record) {
      {
        // A resident row's spill-tier copy is stale: skip it.
        const uint64_t hash = KeyHash(key);
        const Stripe& stripe = StripeOf(hash);
        ReaderMutexLock lock(&stripe.mu);
        if (stripe.index().contains(KeyProbe{key, hash})) {
          return absl::OkStatus();
        }
      }
      uint32_t word[2];
      std::memcpy(word, record, sizeof(word));
      std::memcpy(floats.data(), record + sizeof(word),
                  sizeof(float) * floats.size());
      visit(RowView{key, absl::MakeConstSpan(floats.data(), dim_),
                    absl::MakeConstSpan(floats.data() + dim_, state_floats_),
                    word[1] & kCountMask, word[0]});
      return absl::OkStatus();
    });
  }

  TableStats Stats() const override {
    TableStats stats;
    for (const auto& stripe_ptr : stripes_) {
      const Stripe& stripe = *stripe_ptr;
      ReaderMutexLock lock(&stripe.mu);
      stats.resident_rows += stripe.index().size();
      stats.spilled_rows += stripe.spill().spilled_rows;
      stats.resident_bytes += stripe.ResidentBytes();
      const StripeCounters& c = stripe.counters();
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
    if (spill_ != nullptr) {
      const embedding_internal::SpillStoreStats spill = spill_->Stats();
      stats.spilled_disk_bytes = spill_->DiskBytes();
      stats.spill_multigets = spill.multiget_calls;
      stats.spill_multiget_keys = spill.multiget_keys;
      stats.spill_multiget_micros = spill.multiget_micros;
    }
    stats.resident_bytes += sizeof(*this) + stripes_.size() * sizeof(Stripe);
    stats.payload_bytes = stats.rows *
                          static_cast<uint64_t>(dim_ + state_floats_) *
                          sizeof(float);
    stats.memory_budget_bytes = spec_.memory_budget_bytes;
    stats.over_budget = spec_.memory_budget_bytes > 0 &&
                        stats.resident_bytes > spec_.memory_budget_bytes;
    stats.pulled_keys = pulled_keys_.load(std::memory_order_relaxed);
    stats.pushed_keys = pushed_keys_.load(std::memory_order_relaxed);
    stats.looked_up_keys = looked_up_keys_.load(std::memory_order_relaxed);
    stats.pull_requests = pull_requests_.load(std::memory_order_relaxed);
    stats.push_requests = push_requests_.load(std::memory_order_relaxed);
    stats.lookup_requests = lookup_requests_.load(std::memory_order_relaxed);
    return stats;
  }

 private:
  static int32_t RoundUp4(int32_t x) { return (x + 3) & ~3; }

  uint32_t StripeIndex(uint64_t hash) const {
    return StripeIndexOfHash(hash, stripe_mask_);
  }
  Stripe& StripeOf(uint64_t hash) const { return *stripes_[StripeIndex(hash)]; }

  absl::Status SizeMismatch(absl::string_view op, absl::string_view what,
                            size_t keys, size_t floats) const {
    return absl::InvalidArgumentError(absl::StrCat(
        op, " of table '", spec_.name, "': ", keys, " keys need ", keys * dim_,
        " ", what, " (dim ", dim_, "), got ", floats,
        floats % dim_ == 0 ? absl::StrCat(" (", floats / dim_, " rows)")
                           : std::string(" (not a multiple of dim)")));
  }

  // INVALID_ARGUMENT naming the first NaN or infinite gradient.
  absl::Status CheckFinite(absl::Span<const uint64_t> keys,
                           absl::Span<const float> grads) const {
    // A float is NaN or infinite iff its exponent bits are all ones; adding
    // one to such an exponent carries into the sign bit. OR-ing integers
    // vectorises (a float sum would run serially without -ffast-math).
    uint32_t carry = 0;
    const size_t n = grads.size();
    for (size_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &grads[i], sizeof(bits));
      carry |= (bits & 0x7f800000u) + 0x00800000u;
    }
    if ((carry & 0x80000000u) == 0) return absl::OkStatus();
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!std::isfinite(grads[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Push of table '", spec_.name, "': gradient of key ",
            keys[i / dim_], " (batch position ", i / dim_, ", element ",
            i % dim_, ") is ", grads[i], "; the whole push is refused"));
      }
    }
    return absl::OkStatus();
  }

  uint64_t SecondsSinceEpoch() const {
    const int64_t s = absl::ToInt64Seconds(options_.clock() - epoch_);
    return s < 0 ? 0 : static_cast<uint64_t>(s);
  }

  // The last-touch value of rows touched by a request in `context`.
  uint32_t Touch(const AccessContext& context) {
    if (spec_.eviction.ttl_unit == EvictionSpec::TtlUnit::kSeconds) {
      return static_cast<uint32_t>(
          std::min<uint64_t>(SecondsSinceEpoch(), kMaxTouch));
    }
    uint64_t latest = latest_step_.load(std::memory_order_relaxed);
    while (context.step > latest &&
           !latest_step_.compare_exchange_weak(latest, context.step,
                                               std::memory_order_relaxed)) {
    }
    return static_cast<uint32_t>(std::min<uint64_t>(context.step, kMaxTouch));
  }

  // Sorts batch positions by stripe (a counting sort) into the thread's
  // scratch, with each key's hash.
  BatchScratch& GroupByStripe(absl::Span<const uint64_t> keys,
                              BatchScratch& scratch) const {
    const size_t n = keys.size();
    const size_t num_stripes = stripes_.size();
    scratch.order.resize(n);
    scratch.hashes.resize(n);
    scratch.rows.resize(n);
    scratch.group_begin.assign(num_stripes + 1, 0);
    scratch.position_hashes.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t hash = KeyHash(keys[i]);
      scratch.position_hashes[i] = hash;
      ++scratch.group_begin[StripeIndex(hash) + 1];
    }
    for (size_t s = 0; s < num_stripes; ++s) {
      scratch.group_begin[s + 1] += scratch.group_begin[s];
    }
    scratch.cursor.assign(scratch.group_begin.begin(),
                          scratch.group_begin.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      const uint64_t hash = scratch.position_hashes[i];
      const uint32_t slot = scratch.cursor[StripeIndex(hash)]++;
      scratch.order[slot] = static_cast<uint32_t>(i);
      scratch.hashes[slot] = hash;
    }
    return scratch;
  }

  // Runs `work(stripe, begin, end)` under each stripe's lock for the
  // stripes that have keys in the batch. Starts at a different stripe per
  // call and defers stripes whose lock is busy, so that concurrent batches
  // rarely wait on each other.
  template <typename Work>
  absl::Status ForEachStripe(BatchScratch& scratch, Work&& work) {
    const uint32_t num_stripes = static_cast<uint32_t>(stripes_.size());
    const uint32_t start =
        rotation_.fetch_add(7, std::memory_order_relaxed) & stripe_mask_;
    scratch.deferred.clear();
    absl::Status status;
    for (uint32_t k = 0; k < num_stripes; ++k) {
      const uint32_t s = (start + k) & stripe_mask_;
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      Stripe& stripe = *stripes_[s];
      if (stripe.mu.TryLock()) {
        status.Update(work(stripe, s, begin, end));
        stripe.mu.Unlock();
      } else {
        scratch.deferred.push_back(static_cast<int32_t>(s));
      }
    }
    for (int32_t s : scratch.deferred) {
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      status.Update(work(stripe, static_cast<uint32_t>(s),
                         scratch.group_begin[s], scratch.group_begin[s + 1]));
    }
    return status;
  }

  // How much of a row an operation reads: a Pull only the header and the
  // values, an update the optimizer state too.
  enum class RowPart { kValues, kWhole };

  // The row whose index slot matches `hash`'s fingerprint, or kNoRow; the
  // row's `part` (header included) is prefetched. No row is read: the
  // caller checks the key in the header when it uses the row.
  RowId FindByFingerprint(const Stripe& stripe, uint64_t hash, RowPart part,
                          bool for_write) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
    const RowIndex& index = stripe.index();
    auto it = index.find(FingerprintProbe{hash}, hash);
    if (it == index.end()) return kNoRow;
    PrefetchRow(stripe, it->id(), part, for_write, /*from_byte=*/0);
    return it->id();
  }

  // Finds the row of each grouped position in [begin, end) into
  // scratch.rows (kNoRow when absent), prefetching index slots and rows.
  void FindRows(const Stripe& stripe, absl::Span<const uint64_t> keys,
                BatchScratch& scratch, uint32_t begin, uint32_t end,
                bool for_write) const ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
    // Three stages in flight, as in PullGroup: the index slots of key j+16
    // are prefetched, key j+8 is found by fingerprint and its row fetched,
    // and key j's row is checked against the key (a row of another key
    // with the same fingerprint is replaced by an exact lookup).
    const RowIndex& index = stripe.index();
    const auto key_at = [&](uint32_t j) { return keys[scratch.order[j]]; };
    const auto find_by_fingerprint = [&](uint32_t j) {
      scratch.rows[j] = FindByFingerprint(stripe, scratch.hashes[j],
                                          RowPart::kWhole, for_write);
    };
    const uint32_t index_lead = static_cast<uint32_t>(kIndexPrefetchDistance);
    const uint32_t lookup_lead = static_cast<uint32_t>(kRowPrefetchDistance);
    for (uint32_t j = begin; j < std::min(end, begin + index_lead); ++j) {
      index.prefetch(KeyProbe{key_at(j), scratch.hashes[j]});
    }
    for (uint32_t j = begin; j < std::min(end, begin + lookup_lead); ++j) {
      find_by_fingerprint(j);
    }
    for (uint32_t j = begin; j < end; ++j) {
      if (j + index_lead < end) {
        index.prefetch(
            KeyProbe{key_at(j + index_lead), scratch.hashes[j + index_lead]});
      }
      if (j + lookup_lead < end) find_by_fingerprint(j + lookup_lead);
      const RowId id = scratch.rows[j];
      if (id == kNoRow || stripe.Header(id).key == key_at(j)) continue;
      auto it =
          index.find(KeyProbe{key_at(j), scratch.hashes[j]}, scratch.hashes[j]);
      scratch.rows[j] = it == index.end() ? kNoRow : it->id();
    }
  }

  // Prefetches the cache lines of the row's `part` from `from_byte` on (by
  // default after the first: an exact lookup that found the row has read
  // the header).
  void PrefetchRow(const Stripe& stripe, RowId id, RowPart part, bool for_write,
                   size_t from_byte = 64) const {
    const char* row = reinterpret_cast<const char*>(stripe.Row(id));
    const size_t end =
        sizeof(float) * (part == RowPart::kValues
                             ? static_cast<size_t>(kHeaderFloats + dim_)
                             : static_cast<size_t>(row_floats_));
    for (size_t offset = from_byte; offset < end; offset += 64) {
      if (for_write) {
        PrefetchWrite(row + offset);
      } else {
        PrefetchRead(row + offset);
      }
    }
  }

  // A new row for `key` with its initial values and optimizer state.
  absl::StatusOr<RowId> CreateRow(Stripe& stripe, uint64_t key, uint32_t touch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    ASSIGN_OR_RETURN(const RowId id, stripe.AllocateRow(key, touch));
    float* row = stripe.Row(id);
    InitialRow(spec_.initializer, spec_.seed, key,
               absl::MakeSpan(row + kHeaderFloats, dim_));
    optimizer_->InitState(row + kHeaderFloats + dim_);
    stripe.MutableHeader(id).access_word = kDirtyBit | kReferencedBit;
    stripe.IndexRow(id);
    ++stripe.counters().admitted;
    SpillState& spill = stripe.spill();
    if (!spill.removed_keys.empty()) spill.removed_keys.erase(key);
    if (spill.frequency != nullptr) spill.newcomers.push_back(id);
    return id;
  }

  // Moves a spilled row back into memory. Its spill-tier copy stays: a
  // resident row always wins, and removals delete the copy. Until the row's
  // embedding or optimizer state changes the copy is current, and evicting
  // the row writes nothing (SettleSpill); after a change the eviction
  // overwrites it. Keeping the copy halves the spill tier's writes, and
  // rows that were only read cost none.
  absl::StatusOr<RowId> PromoteRow(Stripe& stripe, uint64_t key,
                                   const char* record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    ASSIGN_OR_RETURN(const RowId id, stripe.AllocateRow(key, 0));
    std::memcpy(reinterpret_cast<char*>(stripe.Row(id)) + kRecordOffset, record,
                record_bytes_);
    RowHeader& header = stripe.MutableHeader(id);
    SpillState& spill = stripe.spill();
    header.access_word = (header.access_word & kCountMask) | kReferencedBit;
    if (spill.dirty_keys.erase(key) > 0) header.access_word |= kDirtyBit;
    stripe.IndexRow(id);
    stripe.NoteCurrentSpillCopy(id, AccessMetadata(header));
    --spill.spilled_rows;
    ++stripe.counters().promotions;
    spill.newcomers.push_back(id);
    return id;
  }

  absl::Status PullGroup(Stripe& stripe, absl::Span<const uint64_t> keys,
                         absl::Span<float> values, BatchScratch& scratch,
                         uint32_t begin, uint32_t end, uint32_t touch,
                         const MissPolicy& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    // One pass, three stages in flight: the index slots of key j+16 are
    // prefetched, key j+8 is looked up and its row prefetched, and row j is
    // copied out.
    const auto probe_at = [&](uint32_t j) {
      return KeyProbe{keys[scratch.order[j]], scratch.hashes[j]};
    };
    const auto find_and_prefetch =
        [&](uint32_t j) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          // Checked against the key when it is used.
          scratch.rows[j] = FindByFingerprint(
              stripe, scratch.hashes[j], RowPart::kValues, /*for_write=*/false);
          // Batch order is not stripe order: the output rows are written at
          // scattered positions, so fetch their lines for writing too.
          const char* out = reinterpret_cast<const char*>(
              values.data() + static_cast<size_t>(scratch.order[j]) * dim_);
          for (size_t offset = 0; offset < sizeof(float) * dim_; offset += 64) {
            PrefetchWrite(out + offset);
          }
        };
    const uint32_t lookup_lead = static_cast<uint32_t>(kRowPrefetchDistance);
    const uint32_t index_lead = static_cast<uint32_t>(kIndexPrefetchDistance);
    for (uint32_t j = begin; j < std::min(end, begin + index_lead); ++j) {
      stripe.index().prefetch(probe_at(j));
    }
    for (uint32_t j = begin; j < std::min(end, begin + lookup_lead); ++j) {
      find_and_prefetch(j);
    }
    for (uint32_t j = begin; j < end; ++j) {
      if (j + index_lead < end)
        stripe.index().prefetch(probe_at(j + index_lead));
      if (j + lookup_lead < end) find_and_prefetch(j + lookup_lead);
      const uint32_t pos = scratch.order[j];
      float* out = values.data() + static_cast<size_t>(pos) * dim_;
      RowId id = scratch.rows[j];
      // Another key with the same fingerprint: look the key up exactly.
      if (id != kNoRow && stripe.Header(id).key != keys[pos]) id = kNoRow;
      if (id == kNoRow) {
        // Absent when found, but an earlier duplicate in this batch may
        // have created it since.
        const uint64_t key = keys[pos];
        const KeyProbe probe{key, scratch.hashes[j]};
        auto it = stripe.index().find(probe, probe.hash);
        if (it != stripe.index().end()) {
          id = it->id();
        } else if (policy.defer != nullptr) {
          policy.defer->push_back(pos);
          continue;
        } else if (const char* record = Spilled(policy, key)) {
          ASSIGN_OR_RETURN(id, PromoteRow(stripe, key, record));
        } else if (stripe.admission().RecordSighting(key)) {
          ASSIGN_OR_RETURN(id, CreateRow(stripe, key, touch));
        } else {
          ++stripe.counters().admission_rejected;
          InitialRow(spec_.initializer, spec_.seed, key,
                     absl::MakeSpan(out, dim_));
          continue;
        }
      }
      RowHeader& header = stripe.MutableHeader(id);
      header.last_touch = touch;
      uint32_t word = header.access_word;
      if ((word & kCountMask) != kCountMask) ++word;
      header.access_word = word | kReferencedBit;
      std::memcpy(out, stripe.Row(id) + kHeaderFloats, sizeof(float) * dim_);
    }
    return absl::OkStatus();
  }

  absl::Status PushGroup(Stripe& stripe, absl::Span<const uint64_t> keys,
                         absl::Span<const float> grads, BatchScratch& scratch,
                         uint32_t begin, uint32_t end, uint32_t touch,
                         const MissPolicy& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    FindRows(stripe, keys, scratch, begin, end, /*for_write=*/true);
    const bool create_missing =
        spec_.admission.kind == AdmissionSpec::Kind::kAlways;
    for (uint32_t j = begin; j < end; ++j) {
      if (scratch.rows[j] != kNoRow) continue;
      const uint64_t key = keys[scratch.order[j]];
      const KeyProbe probe{key, scratch.hashes[j]};
      auto it = stripe.index().find(probe, probe.hash);
      if (it != stripe.index().end()) {
        scratch.rows[j] = it->id();  // created by an earlier duplicate
      } else if (policy.defer != nullptr) {
        policy.defer->push_back(scratch.order[j]);
      } else if (const char* record = Spilled(policy, key)) {
        ASSIGN_OR_RETURN(scratch.rows[j], PromoteRow(stripe, key, record));
      } else if (create_missing) {
        ASSIGN_OR_RETURN(scratch.rows[j], CreateRow(stripe, key, touch));
      } else {
        ++stripe.counters().pushes_dropped;
      }
    }
    // Duplicates: a row id marked twice in `seen` is named more than once;
    // `repeated` marks those rows. Both bitmaps are cleared on the way out.
    const size_t words = (static_cast<size_t>(stripe.used_rows()) + 63) / 64;
    if (scratch.seen_rows.size() < words) {
      scratch.seen_rows.resize(words, 0);
      scratch.repeated_rows.resize(words, 0);
    }
    uint64_t* seen = scratch.seen_rows.data();
    uint64_t* repeated = scratch.repeated_rows.data();
    bool any_repeated = false;
    for (uint32_t j = begin; j < end; ++j) {
      const RowId id = scratch.rows[j];
      if (id == kNoRow) continue;
      const uint64_t bit = uint64_t{1} << (id & 63);
      if (seen[id >> 6] & bit) {
        repeated[id >> 6] |= bit;
        any_repeated = true;
      }
      seen[id >> 6] |= bit;
    }
    // Rows named once get their gradient directly; repeated rows sum their
    // gradients in batch order (0 + g1 + g2 ... equals g1 + g2 ... exactly)
    // and get one update at the end.
    scratch.repeated_slot.clear();
    scratch.repeated_sums.clear();
    for (uint32_t j = begin; j < end; ++j) {
      const RowId id = scratch.rows[j];
      if (id == kNoRow) continue;
      const float* grad =
          grads.data() + static_cast<size_t>(scratch.order[j]) * dim_;
      if (!any_repeated || !(repeated[id >> 6] & (uint64_t{1} << (id & 63)))) {
        ApplyToRow(stripe, id, grad, touch);
        continue;
      }
      auto [it, inserted] =
          scratch.repeated_slot.try_emplace(id, scratch.repeated_slot.size());
      if (inserted)
        scratch.repeated_sums.resize(scratch.repeated_sums.size() + dim_, 0.0f);
      float* sum = scratch.repeated_sums.data() + it->second * dim_;
      for (int32_t d = 0; d < dim_; ++d) sum[d] += grad[d];
    }
    for (const auto& [id, slot] : scratch.repeated_slot) {
      ApplyToRow(stripe, id, scratch.repeated_sums.data() + slot * dim_, touch);
    }
    for (uint32_t j = begin; j < end; ++j) {
      const RowId id = scratch.rows[j];
      if (id == kNoRow) continue;
      seen[id >> 6] = 0;
      repeated[id >> 6] = 0;
    }
    return absl::OkStatus();
  }

  // --- Checkpoints -------------------------------------------------------

  absl::StatusOr<std::unique_ptr<TableSnapshot>> TakeSnapshot(
      bool incremental) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const bool first = !tracking_changes_.load(std::memory_order_relaxed);
    auto snapshot = std::make_unique<CopiedSnapshot>(
        incremental && !first, record_bytes_, stripe_mask_);
    const bool only_changed = snapshot->incremental();
    std::vector<uint64_t> spilled_dirty;
    // The pause: every stripe locked (in index order, the only place that
    // holds more than one), resident rows copied, change sets reset.
    const absl::Time paused = absl::Now();
    for (auto& stripe : stripes_) stripe->mu.Lock();
    if (!only_changed) {
      // Sized once: growing the buffers while paused would copy them.
      size_t resident = 0;
      for (auto& stripe : stripes_) resident += stripe->index().size();
      snapshot->Reserve(resident);
    }
    for (auto& stripe_ptr : stripes_) {
      Stripe& stripe = *stripe_ptr;
      for (RowId id = 0; id < stripe.used_rows(); ++id) {
        RowHeader& header = stripe.MutableHeader(id);
        if (header.last_touch == kFreeRowMark) continue;
        if (!only_changed || (header.access_word & kDirtyBit)) {
          snapshot->AddRecord(
              header.key,
              reinterpret_cast<const char*>(stripe.Row(id)) + kRecordOffset);
        }
        header.access_word &= ~kDirtyBit;
      }
      SpillState& spill = stripe.spill();
      if (only_changed) {
        spilled_dirty.insert(spilled_dirty.end(), spill.dirty_keys.begin(),
                             spill.dirty_keys.end());
        for (uint64_t key : spill.removed_keys) {
          snapshot->entries_.push_back(
              CopiedSnapshot::Entry{key, CopiedSnapshot::kRemoved});
        }
      }
      spill.dirty_keys.clear();
      spill.removed_keys.clear();
      snapshot->admission_states_.push_back(stripe.admission().SaveState());
    }
    snapshot->copied_rows_ = snapshot->entries_.size();
    if (spill_ != nullptr) snapshot->spill_view_ = spill_->NewReadView();
    tracking_changes_.store(true, std::memory_order_relaxed);
    for (auto it = stripes_.rbegin(); it != stripes_.rend(); ++it) {
      (*it)->mu.Unlock();
    }
    snapshot->pause_ = absl::Now() - paused;
    std::sort(spilled_dirty.begin(), spilled_dirty.end());
    RETURN_IF_ERROR(snapshot->Finish(spilled_dirty));
    return std::unique_ptr<TableSnapshot>(std::move(snapshot));
  }

  bool spills() const override { return spill_ != nullptr; }

  uint32_t StripeOfKey(uint64_t key) const override {
    return StripeIndex(KeyHash(key));
  }

  absl::Status AdoptSpillFile(
      const std::string& path, absl::Span<const uint64_t> keys,
      absl::Span<const char> records,
      absl::Span<const uint64_t> rows_per_stripe) override {
    if (spill_ == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table '", spec_.name, "' has no spill tier to adopt '", path, "'"));
    }
    if (records.size() != keys.size() * record_bytes_ ||
        rows_per_stripe.size() != stripes_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AdoptSpillFile of table '", spec_.name, "': ", keys.size(),
          " keys with ", records.size(), " bytes of records (", record_bytes_,
          " each) and row counts of ", rows_per_stripe.size(), " stripes (",
          stripes_.size(), " here)"));
    }
    RETURN_IF_ERROR(spill_->Adopt(path));
    return PlaceRowsOfSpillTier(keys, records, rows_per_stripe);
  }

  absl::Status RestoreRows(absl::Span<const uint64_t> keys,
                           absl::Span<const char> records,
                           RestoredKeys assume) override {
    if (records.size() != keys.size() * record_bytes_) {
      return absl::InvalidArgumentError(
          absl::StrCat("RestoreRows of table '", spec_.name, "': ", keys.size(),
                       " keys need ", keys.size() * record_bytes_,
                       " bytes of records, got ", records.size()));
    }
    const bool keys_are_new = assume == RestoredKeys::kNew;
    if (spill_ != nullptr && keys_are_new && keys.size() >= kMinRowsToIngest) {
      return RestoreNewRowsByIngesting(keys, records);
    }
    BatchScratch& scratch = GroupByStripe(keys, ThreadScratch(0));
    std::vector<uint64_t> not_resident;
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      SpillState& spill = stripe.spill();
      SpillWrites writes;
      // Nothing ever spilled from this stripe: no need to look.
      const bool may_be_spilled =
          spill_ != nullptr && !keys_are_new &&
          (spill.spilled_rows > 0 || spill.generation > 0);
      if (may_be_spilled) {
        // Rows restored over spilled ones replace them.
        not_resident.clear();
        for (uint32_t j = begin; j < end; ++j) {
          const uint64_t key = keys[scratch.order[j]];
          if (!stripe.index().contains(KeyProbe{key, scratch.hashes[j]})) {
            not_resident.push_back(key);
          }
        }
        const std::vector<uint64_t> candidates = SortedUnique(not_resident);
        FetchedRows fetched(record_bytes_);
        RETURN_IF_ERROR(fetched.Fetch(*spill_, candidates));
        for (uint64_t key : candidates) {
          if (fetched.Find(key) == nullptr) continue;
          --spill.spilled_rows;
          spill.dirty_keys.erase(key);
        }
      }
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t pos = scratch.order[j];
        const uint64_t key = keys[pos];
        auto it = stripe.index().find(KeyProbe{key, scratch.hashes[j]},
                                      scratch.hashes[j]);
        const char* record =
            records.data() + static_cast<size_t>(pos) * record_bytes_;
        if (!spill.removed_keys.empty()) spill.removed_keys.erase(key);
        RowId id;
        if (it != stripe.index().end()) {
          id = it->id();
        } else if (stripe.index().size() >= max_resident_per_stripe_) {
          // The stripe is full: straight to the spill tier, in key order
          // (files are sorted), which RocksDB takes fastest.
          writes.put_keys.push_back(key);
          AppendCleanRecord(record, record_bytes_, writes.put_records);
          ++spill.spilled_rows;
          continue;
        } else {
          ASSIGN_OR_RETURN(id, stripe.AllocateRow(key, 0));
          stripe.IndexRow(id);
        }
        std::memcpy(reinterpret_cast<char*>(stripe.Row(id)) + kRecordOffset,
                    record, record_bytes_);
        stripe.MutableHeader(id).access_word &= kCountMask;
        stripe.ForgetSpillCopy(id);  // a spill-tier copy holds the old row
      }
      if (spill_ != nullptr) RETURN_IF_ERROR(SettleSpill(stripe, writes));
    }
    return absl::OkStatus();
  }

  // RestoreRows of many new keys into a spilling table: every row goes to
  // the spill tier first, in one SST file ingested by RocksDB (sorted, no
  // memtable; a checkpoint's rows arrive in key order, so the files do not
  // overlap and need no compaction); then each stripe takes what fits in
  // memory. The copies of the rows that became resident stay in RocksDB,
  // stale-but-harmless like those of promoted rows (resident wins). Rows
  // are in RocksDB before any stripe counts them: a concurrent Pull of such
  // a key finds the restored row, never a fresh one.
  absl::Status RestoreNewRowsByIngesting(absl::Span<const uint64_t> keys,
                                         absl::Span<const char> records) {
    // Sorted, flag-free records; a checkpoint file's batch already is.
    bool ready = true;
    for (size_t i = 0; ready && i < keys.size(); ++i) {
      uint32_t word;
      std::memcpy(&word, records.data() + i * record_bytes_ + 4, sizeof(word));
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
            "RestoreRows of table '", spec_.name, "': repeated keys"));
      }
      sorted_records.reserve(records.size());
      for (uint32_t i : order) {
        AppendCleanRecord(
            records.data() + static_cast<size_t>(i) * record_bytes_,
            record_bytes_, sorted_records);
      }
      ingest_keys = sorted_keys;
      ingest_records = sorted_records.data();
    }
    RETURN_IF_ERROR(spill_->Ingest(ingest_keys, ingest_records));
    return PlaceRowsOfSpillTier(keys, records);
  }

  // The second step of both restores that go through the spill tier: rows
  // whose records are there already move into memory while their stripe
  // has room. The others count as spilled: the keys not placed, or, given
  // `rows_per_stripe` (the spill tier holds that many rows of each stripe,
  // `keys` among them), those counts less the rows placed.
  absl::Status PlaceRowsOfSpillTier(
      absl::Span<const uint64_t> keys, absl::Span<const char> records,
      absl::Span<const uint64_t> rows_per_stripe = {}) {
    BatchScratch& scratch = GroupByStripe(keys, ThreadScratch(0));
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end && rows_per_stripe.empty()) continue;
      Stripe& stripe = *stripes_[s];
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
        auto it = stripe.index().find(KeyProbe{key, scratch.hashes[j]},
                                      scratch.hashes[j]);
        RowId id;
        if (it != stripe.index().end()) {
          id = it->id();  // created by a concurrent Pull: the restored row wins
        } else if (stripe.index().size() >= max_resident_per_stripe_) {
          continue;
        } else {
          ASSIGN_OR_RETURN(id, stripe.AllocateRow(key, 0));
          stripe.IndexRow(id);
        }
        ++placed;
        std::memcpy(reinterpret_cast<char*>(stripe.Row(id)) + kRecordOffset,
                    records.data() + static_cast<size_t>(pos) * record_bytes_,
                    record_bytes_);
        RowHeader& header = stripe.MutableHeader(id);
        header.access_word &= kCountMask;
        // The spill tier holds this very record.
        stripe.NoteCurrentSpillCopy(id, AccessMetadata(header));
      }
      const uint64_t held =
          rows_per_stripe.empty() ? end - begin : rows_per_stripe[s];
      spill.spilled_rows += held - std::min(placed, held);
    }
    return absl::OkStatus();
  }

  absl::Status MergeAdmissionStates(
      const std::vector<std::string>& states) override {
    if (states.size() != stripes_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", spec_.name, "' has ", stripes_.size(),
          " lock stripes but the saved admission state has ", states.size()));
    }
    for (size_t s = 0; s < stripes_.size(); ++s) {
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      RETURN_IF_ERROR(stripe.admission().MergeState(states[s]));
    }
    return absl::OkStatus();
  }

  // --- Spill tier -------------------------------------------------------

  // The first pass of a batch defers misses when there is a spill tier.
  MissPolicy FirstPassPolicy(BatchScratch& scratch) const {
    if (spill_ == nullptr) return MissPolicy{};
    scratch.missed_positions.clear();
    scratch.generation_seen.assign(stripes_.size(), 0);
    return MissPolicy{&scratch.missed_positions, nullptr};
  }

  void RecordGeneration(BatchScratch& scratch, const Stripe& stripe,
                        uint32_t s) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
    if (spill_ != nullptr)
      scratch.generation_seen[s] = stripe.spill().generation;
  }

  // Runs `group(stripe, begin, end, policy)` under each stripe's lock over
  // the grouped batch; with a spill tier, misses are deferred to
  // scratch.missed_positions and each stripe's generation is recorded.
  template <typename Group>
  absl::Status FirstPass(BatchScratch& scratch, Group&& group) {
    const MissPolicy policy = FirstPassPolicy(scratch);
    return ForEachStripe(
        scratch, [&](Stripe& stripe, uint32_t s, uint32_t begin, uint32_t end)
                     ABSL_NO_THREAD_SAFETY_ANALYSIS {
                       RecordGeneration(scratch, stripe, s);
                       CountSightings(stripe, scratch, begin, end);
                       return group(stripe, begin, end, policy);
                     });
  }

  // With a spill tier: the group's keys into the stripe's frequency sketch.
  static void CountSightings(Stripe& stripe, const BatchScratch& scratch,
                             uint32_t begin, uint32_t end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    embedding_internal::CountMinSketch* frequency =
        stripe.spill().frequency.get();
    if (frequency == nullptr) return;
    for (uint32_t j = begin; j < end; ++j) frequency->Add(scratch.hashes[j]);
  }

  // The batch positions of stripe `s`'s group.
  static absl::Span<const uint32_t> GroupOrder(const BatchScratch& scratch,
                                               size_t s) {
    return absl::MakeConstSpan(scratch.order)
        .subspan(scratch.group_begin[s],
                 scratch.group_begin[s + 1] - scratch.group_begin[s]);
  }

  static std::vector<uint64_t> KeysAt(absl::Span<const uint64_t> keys,
                                      absl::Span<const uint32_t> positions) {
    std::vector<uint64_t> at(positions.size());
    for (size_t i = 0; i < positions.size(); ++i) at[i] = keys[positions[i]];
    return at;
  }

  // The deferred positions in batch order.
  static std::vector<uint32_t> SortedMisses(const BatchScratch& scratch) {
    std::vector<uint32_t> missed = scratch.missed_positions;
    std::sort(missed.begin(), missed.end());
    return missed;
  }

  static const char* Spilled(const MissPolicy& policy, uint64_t key) {
    return policy.fetched == nullptr ? nullptr : policy.fetched->Find(key);
  }

  bool Expired(uint32_t last_touch, uint64_t now) const {
    return last_touch < now && now - last_touch > spec_.eviction.ttl;
  }

  void NoteRemoved(Stripe& stripe, uint64_t key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    if (tracking_changes_.load(std::memory_order_relaxed)) {
      stripe.spill().removed_keys.insert(key);
    }
  }

  // The second pass over a batch's misses: one MultiGet for all of them
  // without locks, then each stripe under its lock runs `work` with the
  // fetched rows to promote (re-reading its keys first if the stripe wrote
  // to the spill tier since the first pass saw it), and settles its spill
  // writes and evictions.
  template <typename Work>
  absl::Status ResolveMisses(absl::Span<const uint64_t> miss_keys,
                             absl::Span<const uint64_t> generation_seen,
                             Work&& work) {
    FetchedRows fetched(record_bytes_);
    RETURN_IF_ERROR(fetched.Fetch(*spill_, SortedUnique(miss_keys)));
    BatchScratch& sub = GroupByStripe(miss_keys, ThreadScratch(1));
    SpillWrites writes;
    absl::Status status;
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = sub.group_begin[s];
      const uint32_t end = sub.group_begin[s + 1];
      if (begin == end) continue;
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      if (stripe.spill().generation != generation_seen[s]) {
        RETURN_IF_ERROR(fetched.Fetch(
            *spill_, SortedUnique(KeysAt(miss_keys, GroupOrder(sub, s)))));
      }
      writes.clear();
      status.Update(
          work(stripe, sub, begin, end, MissPolicy{nullptr, &fetched}));
      status.Update(SettleSpill(stripe, writes));
    }
    return status;
  }

  // Lookup's second pass: reads the misses from the spill tier; stripes
  // whose tier changed since the first pass are read again under their
  // lock. Returns the keys found.
  absl::StatusOr<uint64_t> LookupSpilled(absl::Span<const uint64_t> keys,
                                         absl::Span<float> values,
                                         absl::Span<bool> found,
                                         const BatchScratch& scratch) {
    const std::vector<uint32_t> missed = SortedMisses(scratch);
    const std::vector<uint64_t> miss_keys = KeysAt(keys, missed);
    FetchedRows fetched(record_bytes_);
    RETURN_IF_ERROR(fetched.Fetch(*spill_, SortedUnique(miss_keys)));
    BatchScratch& sub = GroupByStripe(miss_keys, ThreadScratch(1));
    uint64_t hits = 0;
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = sub.group_begin[s];
      const uint32_t end = sub.group_begin[s + 1];
      if (begin == end) continue;
      const Stripe& stripe = *stripes_[s];
      ReaderMutexLock lock(&stripe.mu);
      const bool changed =
          stripe.spill().generation != scratch.generation_seen[s];
      if (changed) {
        RETURN_IF_ERROR(fetched.Fetch(
            *spill_, SortedUnique(KeysAt(miss_keys, GroupOrder(sub, s)))));
      }
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t pos = missed[sub.order[j]];
        float* out = values.data() + static_cast<size_t>(pos) * dim_;
        const char* source = nullptr;
        if (changed) {
          // Promoted since the first pass?
          auto it = stripe.index().find(KeyProbe{keys[pos], sub.hashes[j]},
                                        sub.hashes[j]);
          if (it != stripe.index().end()) {
            source = reinterpret_cast<const char*>(stripe.Row(it->id())) +
                     kRecordOffset;
          }
        }
        if (source == nullptr) source = fetched.Find(keys[pos]);
        if (source == nullptr) continue;
        std::memcpy(out, source + 8, sizeof(float) * dim_);
        found[pos] = true;
        ++hits;
      }
    }
    return hits;
  }

  // Under the stripe's lock: picks rows to spill if the stripe holds more
  // than its share of the budget, writes them and `writes` in one atomic
  // batch, and only then frees them. On error nothing is freed.
  //
  // A victim whose spill-tier copy is current (same floats) is not written
  // again. A table with a TTL writes its access metadata if it moved (8
  // bytes, a RocksDB Merge), so that the TTL sees every touch. A table
  // without one writes nothing: there last touch and Pull count are
  // statistics, and those of a row that was only read while resident stay
  // as the spill tier has them (they lag the row's, never lead) — the
  // Merges cost as much as whole records (a memtable insert each:
  // docs/benchmarks.md), and skipping them nearly doubles a read-mostly
  // spilling Pull.
  absl::Status SettleSpill(Stripe& stripe, SpillWrites& writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    std::vector<RowId> victims;
    SelectVictims(stripe, victims);
    SpillState& spill = stripe.spill();
    for (RowId id : victims) {
      const RowHeader& header = stripe.Header(id);
      const uint64_t copy = stripe.SpillCopyMetadata(id);
      if (copy == Stripe::kNoCurrentCopy) {
        writes.put_keys.push_back(header.key);
        AppendCleanRecord(
            reinterpret_cast<const char*>(stripe.Row(id)) + kRecordOffset,
            record_bytes_, writes.put_records);
      } else {
        ++stripe.counters().spills_of_unchanged_rows;
        const uint64_t metadata = AccessMetadata(header);
        if (spec_.eviction.ttl > 0 && copy != metadata) {
          writes.metadata_keys.push_back(header.key);
          writes.access_metadata.push_back(metadata);
        }
      }
    }
    if (!writes.empty()) {
      RETURN_IF_ERROR(spill_->Write(writes.put_keys, writes.put_records.data(),
                                    writes.delete_keys, writes.metadata_keys,
                                    writes.access_metadata));
      ++spill.generation;
    }
    for (RowId id : victims) {
      const RowHeader& header = stripe.Header(id);
      if (header.access_word & kDirtyBit) spill.dirty_keys.insert(header.key);
      stripe.FreeRow(id, KeyHash(header.key));
    }
    spill.spilled_rows += victims.size();
    stripe.counters().spills += victims.size();
    writes.clear();
    return absl::OkStatus();
  }

  // CLOCK: rows touched since the hand last passed lose their reference bit
  // and stay; the first unreferenced rows are chosen, until the stripe is
  // 1/16 below its share (so that eviction runs in batches). At most two
  // revolutions, so every row is visited at most twice. Then the rows that
  // entered memory since the last round compete with the chosen ones
  // (KeepFrequentRows).
  void SelectVictims(Stripe& stripe, std::vector<RowId>& victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    SpillState& spill = stripe.spill();
    const uint64_t resident = stripe.index().size();
    if (resident <= max_resident_per_stripe_) {
      // Filling up: no round to compete in soon; newcomers become rows
      // like any other.
      if (spill.newcomers.size() > max_resident_per_stripe_ / 4) {
        spill.newcomers.clear();
      }
      return;
    }
    const uint64_t target =
        max_resident_per_stripe_ - max_resident_per_stripe_ / 16;
    const uint64_t wanted = resident - target;
    const RowId used = stripe.used_rows();
    RowId hand = spill.clock_hand;
    for (uint64_t steps = 0; victims.size() < wanted && steps <= 2ull * used;
         ++steps) {
      if (hand >= used) hand = 0;
      RowHeader& header = stripe.MutableHeader(hand);
      if (header.last_touch != kFreeRowMark) {
        if (header.access_word & kReferencedBit) {
          header.access_word &= ~kReferencedBit;
        } else {
          // Chosen rows get the bit back as a mark, so that the hand's
          // second revolution does not choose them twice.
          victims.push_back(hand);
          header.access_word |= kReferencedBit;
        }
      }
      ++hand;
    }
    spill.clock_hand = hand;
    KeepFrequentRows(stripe, victims);
    spill.newcomers.clear();
  }

  // TinyLFU's admission, one round at a time: the rows that entered memory
  // since the last round (promoted or created) and the CLOCK's victims
  // compete, and the victims.size() of them seen least often (the stripe's
  // frequency sketch; on a tie the newcomer) become the victims. A row
  // seen once (a one-off key, a scan) thus leaves again at the next round,
  // instead of pushing out a row seen more often. Victims that stay keep
  // their mark, the referenced bit: a second chance. A newcomer that leaves
  // costs what any eviction does (a write if it changed in memory; a
  // Pulled row's spill copy is current, so nothing).
  void KeepFrequentRows(Stripe& stripe, std::vector<RowId>& victims)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    SpillState& spill = stripe.spill();
    if (spill.frequency == nullptr || spill.newcomers.empty() ||
        victims.empty()) {
      return;
    }
    struct Candidate {
      uint32_t frequency;
      // Newcomers (0) leave before chosen rows (1) of the same frequency.
      uint32_t was_victim;
      RowId id;
      bool operator<(const Candidate& other) const {
        return frequency != other.frequency ? frequency < other.frequency
                                            : was_victim < other.was_victim;
      }
    };
    const auto frequency = [&](RowId id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return spill.frequency->Estimate(KeyHash(stripe.Header(id).key));
    };
    std::sort(victims.begin(), victims.end());
    std::vector<RowId>& newcomers = spill.newcomers;
    std::sort(newcomers.begin(), newcomers.end());
    newcomers.erase(std::unique(newcomers.begin(), newcomers.end()),
                    newcomers.end());
    std::vector<Candidate> candidates;
    candidates.reserve(victims.size() + newcomers.size());
    for (RowId id : victims) candidates.push_back({frequency(id), 1, id});
    for (RowId id : newcomers) {
      // Freed since it came in, or already chosen by the CLOCK.
      if (stripe.Header(id).last_touch == kFreeRowMark ||
          std::binary_search(victims.begin(), victims.end(), id)) {
        continue;
      }
      candidates.push_back({frequency(id), 0, id});
    }
    const size_t evict = victims.size();
    std::nth_element(candidates.begin(), candidates.begin() + evict,
                     candidates.end());
    for (size_t i = 0; i < evict; ++i) {
      victims[i] = candidates[i].id;
      stripe.counters().spills_of_newcomers += candidates[i].was_victim == 0;
    }
  }

  // TTL over the spill tier: expired rows found by a scan, then checked
  // again and deleted under each stripe's lock.
  absl::StatusOr<uint64_t> SweepSpilled(uint64_t now) {
    std::vector<uint64_t> expired;
    RETURN_IF_ERROR(
        spill_->NewReadView()->ForEach([&](uint64_t key, const char* record) {
          uint32_t last_touch;
          std::memcpy(&last_touch, record, sizeof(last_touch));
          if (Expired(last_touch, now)) expired.push_back(key);
          return absl::OkStatus();
        }));
    if (expired.empty()) return 0;
    BatchScratch& scratch = GroupByStripe(expired, ThreadScratch(0));
    uint64_t evicted = 0;
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      const std::vector<uint64_t> stripe_keys =
          KeysAt(expired, GroupOrder(scratch, s));
      FetchedRows fetched(record_bytes_);
      RETURN_IF_ERROR(fetched.Fetch(*spill_, stripe_keys));
      SpillWrites writes;
      for (uint64_t key : stripe_keys) {
        const char* record = fetched.Find(key);
        if (record == nullptr) continue;
        const uint64_t hash = KeyHash(key);
        auto resident = stripe.index().find(KeyProbe{key, hash}, hash);
        if (resident != stripe.index().end()) {
          // A stale copy is garbage; a current one saves the row's next
          // eviction a write.
          if (stripe.SpillCopyMetadata(resident->id()) ==
              Stripe::kNoCurrentCopy) {
            writes.delete_keys.push_back(key);
          }
          continue;
        }
        uint32_t last_touch;
        std::memcpy(&last_touch, record, sizeof(last_touch));
        if (!Expired(last_touch, now)) continue;
        writes.delete_keys.push_back(key);
        --stripe.spill().spilled_rows;
        stripe.spill().dirty_keys.erase(key);
        NoteRemoved(stripe, key);
        ++stripe.counters().evicted;
        ++evicted;
      }
      RETURN_IF_ERROR(SettleSpill(stripe, writes));
    }
    return evicted;
  }

  void ApplyToRow(Stripe& stripe, RowId id, const float* grad, uint32_t touch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    float* row = stripe.Row(id);
    optimizer_->Apply(row + kHeaderFloats, row + kHeaderFloats + dim_, grad);
    stripe.ForgetSpillCopy(id);
    RowHeader& header = stripe.MutableHeader(id);
    header.last_touch = touch;
    header.access_word |= kDirtyBit | kReferencedBit;
  }

  // Constant after construction.
  const TableSpec spec_;
  const TableOptions options_;
  const int32_t dim_;
  const std::unique_ptr<RowOptimizer> optimizer_;
  const int32_t state_floats_;
  const int32_t row_floats_;
  const uint32_t stripe_mask_;
  const size_t record_bytes_;
  const absl::Time epoch_;
  std::vector<std::unique_ptr<Stripe>> stripes_;
  // Null for a memory-only table.
  const std::unique_ptr<embedding_internal::SpillStore> spill_;
  // With a spill tier: resident rows a stripe may hold.
  uint64_t max_resident_per_stripe_ = UINT64_MAX;
  // Set by the first snapshot: from then on removals are recorded for
  // incremental snapshots. Read and written under stripe locks.
  std::atomic<bool> tracking_changes_{false};

  std::atomic<uint32_t> rotation_{0};
  std::atomic<uint64_t> latest_step_{0};
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
    spill_options.block_cache_bytes = options.spill_block_cache_bytes;
    spill_options.read_around = options.spill_read_around;
    ASSIGN_OR_RETURN(spill,
                     embedding_internal::SpillStore::Open(spill_options));
  }
  return std::unique_ptr<Table>(
      new MemoryTable(spec, std::move(options), std::move(spill)));
}

}  // namespace embedps::embedding
