// One lock stripe of a table: its mutex, the row arena, the row index and
// the admission filter of the keys whose hash selects it, plus what the
// stripe knows of its keys in the spill tier.
//
// The index is an absl::flat_hash_set of 4-byte IndexSlots (a 24-bit row id
// and an 8-bit fingerprint of the key's hash). Equality compares the
// fingerprint, then the key in the row's header; a FingerprintProbe compares
// the fingerprint only and reads no row (batched lookups use it and check
// the key when they reach the row).
//
// Thread safety / invariants:
//  - Everything but the constants is guarded by `mu`; the caller holds it
//    (shared for the const accessors, exclusive for the rest). The table
//    takes more than one stripe's lock only in TakeSnapshot, in index
//    order.
//  - Row ids stay valid until the row is freed, and rows are only freed
//    under `mu`. Row addresses are valid until the next AllocateRow (the
//    arena may move).
//  - A free row's last_touch is kFreeRowMark; every row id below
//    used_rows() is either live (in the index) or on the free list.
//  - With a spill tier, a key is resident or spilled, never both, whenever
//    `mu` is free; a resident row may also have a copy in the spill tier,
//    which is current (SpillCopyMetadata) or stale (memory wins).
#ifndef EMBEDPS_EMBEDDING_INTERNAL_STRIPE_H_
#define EMBEDPS_EMBEDDING_INTERNAL_STRIPE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "embedding/admission.h"
#include "embedding/internal/count_min_sketch.h"
#include "embedding/internal/huge_page_allocator.h"
#include "embedding/internal/row_arena.h"
#include "embedding/internal/row_index_hash.h"
#include "embedding/internal/row_layout.h"

namespace embedps::embedding_internal {

using embedding::AdmissionFilter;

class Stripe;

// A lookup key for the row index, with its hash computed once.
struct KeyProbe {
  uint64_t key;
  uint64_t hash;
};

// One slot of the row index, 4 bytes: the row's id (low 24 bits) and its
// key's 8-bit IndexFingerprint (high 8). A lookup compares fingerprints
// first and reads a row's header only when they are equal: nearly every
// other key in the probed group is told apart without touching its row.
struct IndexSlot {
  uint32_t bits;
  RowId id() const { return bits & 0xFFFFFF; }
  uint8_t fingerprint() const { return static_cast<uint8_t>(bits >> 24); }
};

inline IndexSlot MakeIndexSlot(RowId id, uint64_t hash) {
  return IndexSlot{id | (uint32_t{IndexFingerprint(hash)} << 24)};
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
    return slot.fingerprint() == IndexFingerprint(probe.hash);
  }
  bool operator()(const IndexSlot& slot, const FingerprintProbe& probe) const {
    return (*this)(probe, slot);
  }
};

using RowIndex = absl::flat_hash_set<IndexSlot, RowHash, RowEq,
                                     HugePageAllocator<IndexSlot>>;

// Counters of one stripe; summed by Table::Stats.
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
  // The two sets outgrew their share of the budget
  // (TableCore::max_tracked_keys_per_stripe) and were dropped: the next
  // snapshot is full, and nothing is tracked until then.
  bool tracking_overflowed = false;
  // Recent Pulls and Pushes of the stripe's keys (TinyLFU's frequency
  // sketch, by KeyHash): an eviction round keeps the rows seen more often.
  // Null without a spill tier.
  std::unique_ptr<CountMinSketch> frequency;
  // Rows that entered memory (promoted or created) since the stripe's last
  // eviction round: they compete with the CLOCK's victims for their places.
  // Ids of rows freed since are skipped (SpillPolicy::KeepFrequentRows).
  std::vector<RowId> newcomers;
};

class Stripe {
 public:
  // `row_floats`: floats a row takes in the arena (header included);
  // `huge_pages`: RowArena's.
  Stripe(int32_t row_floats, bool huge_pages,
         std::unique_ptr<AdmissionFilter> admission);

  Stripe(const Stripe&) = delete;
  Stripe& operator=(const Stripe&) = delete;

  mutable Mutex mu;

  float* Row(RowId id) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return reinterpret_cast<float*>(arena_.row(id));
  }
  const RowHeader& Header(RowId id) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return *reinterpret_cast<const RowHeader*>(Row(id));
  }
  RowHeader& MutableHeader(RowId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return *reinterpret_cast<RowHeader*>(Row(id));
  }
  // The row's record (RowRecordBytes of the table).
  char* Record(RowId id) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return reinterpret_cast<char*>(Row(id)) + kRecordOffset;
  }

  RowIndex& index() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return index_; }
  const RowIndex& index() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return index_;
  }
  AdmissionFilter& admission() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return *admission_;
  }
  const AdmissionFilter& admission() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return *admission_;
  }
  StripeCounters& counters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return counters_;
  }
  const StripeCounters& counters() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return counters_;
  }
  SpillState& spill() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return spill_; }
  const SpillState& spill() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    return spill_;
  }
  // With the table's change log on: keys whose rows changed since the log
  // was last taken (TableCore::LogChange), with repeats.
  std::vector<uint64_t>& changes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return changes_;
  }
  // Row ids handed out so far (live or free): ids are in [0, used_rows()).
  RowId used_rows() const ABSL_SHARED_LOCKS_REQUIRED(mu) { return used_rows_; }

  // The row of `key`, or kNoRow: an exact lookup.
  RowId Find(const KeyProbe& probe) const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    auto it = index_.find(probe, probe.hash);
    return it == index_.end() ? kNoRow : it->id();
  }

  // A row for `key`, not yet in the index; its header is written (access
  // word 0). RESOURCE_EXHAUSTED if the stripe is full or the arena cannot
  // grow.
  absl::StatusOr<RowId> AllocateRow(uint64_t key, uint32_t touch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Commits arena room for `rows` rows (RowArena::Commit) and sizes the
  // index for them: what TableSpec::expected_rows asks of each stripe.
  absl::Status Prepare(uint64_t rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RETURN_IF_ERROR(arena_.Commit(rows));
    index_.reserve(rows);
    return absl::OkStatus();
  }

  // Returns the arena's pages beyond the rows handed out to the OS
  // (RowArena::Release).
  void ReleaseUnusedArena() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    arena_.Release(used_rows_);
  }

  // Puts a row whose header is written into the index.
  void IndexRow(RowId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    index_.insert(MakeIndexSlot(id, KeyHash(Header(id).key)));
  }

  // Removes a row that is in the index; `hash` is KeyHash of its key.
  void FreeRow(RowId id, uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The spill tier holds a current copy of a resident row: the same
  // embedding and optimizer state, with access metadata `copy_metadata`
  // (AccessMetadata; the row's own may have moved on since). Evicting such
  // a row writes at most its metadata (SpillPolicy::Settle).
  void NoteCurrentSpillCopy(RowId id, uint64_t copy_metadata)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
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

  // Only while no other thread can see the stripe (construction).
  uint64_t AdmissionBytesUnlocked() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return admission_->bytes();
  }

  // Bytes of rows handed out (the arena's untouched tail is address space,
  // not memory), the index, the free list, the spill copies' metadata and
  // the sketches.
  uint64_t ResidentBytes() const ABSL_SHARED_LOCKS_REQUIRED(mu);

 private:
  RowArena arena_ ABSL_GUARDED_BY(mu);
  RowIndex index_ ABSL_GUARDED_BY(mu);
  RowId used_rows_ ABSL_GUARDED_BY(mu) = 0;
  std::vector<RowId> free_rows_ ABSL_GUARDED_BY(mu);
  // By row id (see NoteCurrentSpillCopy); empty until a row has a copy.
  std::vector<uint64_t> spill_copy_metadata_ ABSL_GUARDED_BY(mu);
  std::unique_ptr<AdmissionFilter> admission_ ABSL_GUARDED_BY(mu);
  StripeCounters counters_ ABSL_GUARDED_BY(mu);
  SpillState spill_ ABSL_GUARDED_BY(mu);
  std::vector<uint64_t> changes_ ABSL_GUARDED_BY(mu);
};

// The index reads keys from rows; called under the stripe's lock (the index
// is only used with it held; the analysis cannot see through the hash set).
inline size_t RowHash::operator()(const IndexSlot& slot) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return KeyHash(stripe->Header(slot.id()).key);
}

inline bool RowEq::operator()(const KeyProbe& probe, const IndexSlot& slot)
    const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  return slot.fingerprint() == IndexFingerprint(probe.hash) &&
         stripe->Header(slot.id()).key == probe.key;
}

inline absl::StatusOr<RowId> Stripe::AllocateRow(uint64_t key, uint32_t touch) {
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

inline void Stripe::FreeRow(RowId id, uint64_t hash) {
  RowHeader& header = MutableHeader(id);
  index_.erase(KeyProbe{header.key, hash});
  header.last_touch = kFreeRowMark;
  ForgetSpillCopy(id);
  free_rows_.push_back(id);
}

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_STRIPE_H_
