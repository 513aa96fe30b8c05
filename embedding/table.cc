#include "embedding/table.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "embedding/admission.h"
#include "embedding/initializer.h"
#include "embedding/internal/huge_page_allocator.h"
#include "embedding/internal/row_arena.h"
#include "embedding/optimizer.h"

namespace embedps::embedding {
namespace {

using RowId = uint32_t;

// Salt that makes the table's key hash independent of the shard routing
// hash (Mix64(key)), so keys of one shard still spread over all stripes.
constexpr uint64_t kTableHashSalt = 0x2545f4914f6cdd1dULL;
// A row's last_touch holds this while the row is on the free list.
constexpr uint32_t kFreeRowMark = UINT32_MAX;
// Largest touch value a live row records.
constexpr uint32_t kMaxTouch = UINT32_MAX - 1;
// Rows the sweep and the scan handle per lock hold.
constexpr RowId kRowsPerLockHold = 4096;
// Row ids are uint32; this one means "no row".
constexpr RowId kNoRow = UINT32_MAX;
constexpr uint64_t kMaxRowsPerStripe = kNoRow - 1;
// How far ahead of use batched loops prefetch.
constexpr size_t kIndexPrefetchDistance = 16;
constexpr size_t kRowPrefetchDistance = 8;

// The first 16 bytes of every row.
struct RowHeader {
  uint64_t key;
  uint32_t last_touch;
  uint32_t access_count;
};
static_assert(sizeof(RowHeader) == 16, "header must stay 16 bytes");
constexpr int32_t kHeaderFloats = sizeof(RowHeader) / sizeof(float);

uint64_t KeyHash(uint64_t key) { return Mix64(key + kTableHashSalt); }

// A lookup key for the row index, with its hash computed once.
struct KeyProbe {
  uint64_t key;
  uint64_t hash;
};

inline void PrefetchRead(const void* p) { __builtin_prefetch(p, 0, 3); }
inline void PrefetchWrite(const void* p) { __builtin_prefetch(p, 1, 3); }

class Stripe;

// Hash and equality of the row index: a stored RowId is hashed and compared
// by the key in its row's header, so the index holds 4 bytes per row.
struct RowHash {
  using is_transparent = void;
  const Stripe* stripe;
  size_t operator()(RowId id) const;
  size_t operator()(const KeyProbe& probe) const { return probe.hash; }
};

struct RowEq {
  using is_transparent = void;
  const Stripe* stripe;
  bool operator()(RowId a, RowId b) const { return a == b; }
  bool operator()(const KeyProbe& probe, RowId id) const;
  bool operator()(RowId id, const KeyProbe& probe) const {
    return (*this)(probe, id);
  }
};

using RowIndex =
    absl::flat_hash_set<RowId, RowHash, RowEq,
                        embedding_internal::HugePageAllocator<RowId>>;

struct StripeCounters {
  uint64_t admitted = 0;
  uint64_t admission_rejected = 0;
  uint64_t pushes_dropped = 0;
  uint64_t evicted = 0;
  uint64_t erased = 0;
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
    header.access_count = 0;
    return id;
  }

  // Removes a row that is in the index.
  void FreeRow(RowId id, uint64_t hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    RowHeader& header = MutableHeader(id);
    index_.erase(KeyProbe{header.key, hash});
    header.last_touch = kFreeRowMark;
    free_rows_.push_back(id);
  }

  // Bytes of rows handed out (the arena's untouched tail is address space,
  // not memory), the index, the free list and the admission sketch.
  uint64_t ResidentBytes() const ABSL_SHARED_LOCKS_REQUIRED(mu) {
    // absl's index: one slot and one control byte per capacity, plus a
    // group's worth of cloned control bytes.
    const uint64_t index_bytes =
        index_.capacity() == 0 ? 0
                               : index_.capacity() * (sizeof(RowId) + 1) + 16;
    const uint64_t row_bytes =
        uint64_t{used_rows_} *
        (arena_.reserved_bytes() / std::max<uint64_t>(arena_.capacity(), 1));
    return row_bytes + index_bytes + free_rows_.capacity() * sizeof(RowId) +
           admission_->bytes();
  }

 private:
  embedding_internal::RowArena arena_ ABSL_GUARDED_BY(mu);
  RowIndex index_ ABSL_GUARDED_BY(mu);
  RowId used_rows_ ABSL_GUARDED_BY(mu) = 0;
  std::vector<RowId> free_rows_ ABSL_GUARDED_BY(mu);
  std::unique_ptr<AdmissionFilter> admission_ ABSL_GUARDED_BY(mu);
  StripeCounters counters_ ABSL_GUARDED_BY(mu);
};

size_t RowHash::operator()(RowId id) const {
  return KeyHash(stripe->Header(id).key);
}

bool RowEq::operator()(const KeyProbe& probe, RowId id) const {
  return stripe->Header(id).key == probe.key;
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
};

BatchScratch& ThreadScratch() {
  thread_local BatchScratch scratch;
  return scratch;
}

class MemoryTable final : public Table {
 public:
  MemoryTable(const TableSpec& spec, TableOptions options)
      : spec_(spec),
        options_(std::move(options)),
        dim_(spec.dim),
        optimizer_(RowOptimizer::Create(spec.optimizer, spec.dim)),
        state_floats_(optimizer_->state_floats()),
        row_floats_(RoundUp4(kHeaderFloats + dim_ + state_floats_)),
        stripe_mask_(static_cast<uint32_t>(spec.num_stripes - 1)),
        epoch_(options_.clock()) {
    stripes_.reserve(spec.num_stripes);
    for (int32_t s = 0; s < spec.num_stripes; ++s) {
      stripes_.push_back(std::make_unique<Stripe>(
          row_floats_,
          AdmissionFilter::Create(spec.admission, MixPair(spec.seed, s),
                                  spec.num_stripes)));
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
    BatchScratch& scratch = GroupByStripe(keys);
    return ForEachStripe(
        scratch, [&](Stripe& stripe, uint32_t begin,
                     uint32_t end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return PullGroup(stripe, keys, values, scratch, begin, end, touch);
        });
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
    BatchScratch& scratch = GroupByStripe(keys);
    return ForEachStripe(
        scratch, [&](Stripe& stripe, uint32_t begin,
                     uint32_t end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return PushGroup(stripe, keys, grads, scratch, begin, end, touch);
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
    BatchScratch& scratch = GroupByStripe(keys);
    for (int32_t s = 0; s < static_cast<int32_t>(stripes_.size()); ++s) {
      const uint32_t begin = scratch.group_begin[s];
      const uint32_t end = scratch.group_begin[s + 1];
      if (begin == end) continue;
      const Stripe& stripe = *stripes_[s];
      ReaderMutexLock lock(&stripe.mu);
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t pos = scratch.order[j];
        float* out = values.data() + static_cast<size_t>(pos) * dim_;
        auto it = stripe.index().find(KeyProbe{keys[pos], scratch.hashes[j]},
                                      scratch.hashes[j]);
        found[pos] = it != stripe.index().end();
        if (found[pos]) {
          std::memcpy(out, stripe.Row(*it) + kHeaderFloats,
                      sizeof(float) * dim_);
          ++hits;
        } else {
          std::fill(out, out + dim_, 0.0f);
        }
      }
    }
    return hits;
  }

  uint64_t Erase(absl::Span<const uint64_t> keys) override {
    uint64_t erased = 0;
    for (uint64_t key : keys) {
      const uint64_t hash = KeyHash(key);
      Stripe& stripe = StripeOf(hash);
      MutexLock lock(&stripe.mu);
      auto it = stripe.index().find(KeyProbe{key, hash}, hash);
      if (it == stripe.index().end()) continue;
      stripe.FreeRow(*it, hash);
      ++stripe.counters().erased;
      ++erased;
    }
    return erased;
  }

  uint64_t SweepExpired() override {
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
        for (RowId id = begin; id < end; ++id) {
          const RowHeader& header = stripe.Header(id);
          if (header.last_touch == kFreeRowMark) continue;
          if (header.last_touch < now &&
              now - header.last_touch > spec_.eviction.ttl) {
            stripe.FreeRow(id, KeyHash(header.key));
            ++stripe.counters().evicted;
            ++evicted;
          }
        }
      }
    }
    return evicted;
  }

  void Scan(absl::FunctionRef<void(const RowView&)> visit) const override {
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
              header.access_count, header.last_touch});
        }
      }
    }
  }

  TableStats Stats() const override {
    TableStats stats;
    for (const auto& stripe_ptr : stripes_) {
      const Stripe& stripe = *stripe_ptr;
      ReaderMutexLock lock(&stripe.mu);
      stats.rows += stripe.index().size();
      stats.resident_bytes += stripe.ResidentBytes();
      const StripeCounters& c = stripe.counters();
      stats.admitted += c.admitted;
      stats.admission_rejected += c.admission_rejected;
      stats.pushes_dropped += c.pushes_dropped;
      stats.evicted += c.evicted;
      stats.erased += c.erased;
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

  // Stripes take the hash's top bits; absl's index uses the low ones.
  uint32_t StripeIndex(uint64_t hash) const {
    return static_cast<uint32_t>(hash >> 52) & stripe_mask_;
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
  BatchScratch& GroupByStripe(absl::Span<const uint64_t> keys) const {
    BatchScratch& scratch = ThreadScratch();
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
        status.Update(work(stripe, begin, end));
        stripe.mu.Unlock();
      } else {
        scratch.deferred.push_back(static_cast<int32_t>(s));
      }
    }
    for (int32_t s : scratch.deferred) {
      Stripe& stripe = *stripes_[s];
      MutexLock lock(&stripe.mu);
      status.Update(
          work(stripe, scratch.group_begin[s], scratch.group_begin[s + 1]));
    }
    return status;
  }

  // Finds the row of each grouped position in [begin, end) into
  // scratch.rows (kNoRow when absent), prefetching index slots and rows.
  void FindRows(const Stripe& stripe, absl::Span<const uint64_t> keys,
                BatchScratch& scratch, uint32_t begin, uint32_t end,
                bool for_write) const ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
    const RowIndex& index = stripe.index();
    const uint32_t prefetch_end =
        std::min(end, begin + static_cast<uint32_t>(kIndexPrefetchDistance));
    for (uint32_t j = begin; j < prefetch_end; ++j) {
      index.prefetch(KeyProbe{keys[scratch.order[j]], scratch.hashes[j]});
    }
    for (uint32_t j = begin; j < end; ++j) {
      if (j + kIndexPrefetchDistance < end) {
        const uint32_t ahead = j + kIndexPrefetchDistance;
        index.prefetch(
            KeyProbe{keys[scratch.order[ahead]], scratch.hashes[ahead]});
      }
      auto it = index.find(KeyProbe{keys[scratch.order[j]], scratch.hashes[j]},
                           scratch.hashes[j]);
      if (it == index.end()) {
        scratch.rows[j] = kNoRow;
        continue;
      }
      scratch.rows[j] = *it;
      PrefetchRow(stripe, *it, for_write);
    }
  }

  // Prefetches the row's cache lines after the first: the key compare that
  // found the row has just read the header line.
  void PrefetchRow(const Stripe& stripe, RowId id, bool for_write) const {
    const char* row = reinterpret_cast<const char*>(stripe.Row(id));
    const size_t row_bytes = static_cast<size_t>(row_floats_) * sizeof(float);
    for (size_t offset = 64; offset < row_bytes; offset += 64) {
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
    stripe.index().insert(id);
    ++stripe.counters().admitted;
    return id;
  }

  absl::Status PullGroup(Stripe& stripe, absl::Span<const uint64_t> keys,
                         absl::Span<float> values, BatchScratch& scratch,
                         uint32_t begin, uint32_t end, uint32_t touch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    // One pass, three stages in flight: the index slots of key j+16 are
    // prefetched, key j+8 is looked up and its row prefetched, and row j is
    // copied out.
    const auto probe_at = [&](uint32_t j) {
      return KeyProbe{keys[scratch.order[j]], scratch.hashes[j]};
    };
    const auto find_and_prefetch =
        [&](uint32_t j) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          const KeyProbe probe = probe_at(j);
          auto it = stripe.index().find(probe, probe.hash);
          scratch.rows[j] = it == stripe.index().end() ? kNoRow : *it;
          if (scratch.rows[j] != kNoRow)
            PrefetchRow(stripe, scratch.rows[j], false);
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
      if (id == kNoRow) {
        // Absent when found, but an earlier duplicate in this batch may
        // have created it since.
        const uint64_t key = keys[pos];
        const KeyProbe probe{key, scratch.hashes[j]};
        auto it = stripe.index().find(probe, probe.hash);
        if (it != stripe.index().end()) {
          id = *it;
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
      if (header.access_count != UINT32_MAX) ++header.access_count;
      std::memcpy(out, stripe.Row(id) + kHeaderFloats, sizeof(float) * dim_);
    }
    return absl::OkStatus();
  }

  absl::Status PushGroup(Stripe& stripe, absl::Span<const uint64_t> keys,
                         absl::Span<const float> grads, BatchScratch& scratch,
                         uint32_t begin, uint32_t end, uint32_t touch)
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
        scratch.rows[j] = *it;  // created by an earlier duplicate
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

  void ApplyToRow(Stripe& stripe, RowId id, const float* grad, uint32_t touch)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    float* row = stripe.Row(id);
    optimizer_->Apply(row + kHeaderFloats, row + kHeaderFloats + dim_, grad);
    stripe.MutableHeader(id).last_touch = touch;
  }

  // Constant after construction.
  const TableSpec spec_;
  const TableOptions options_;
  const int32_t dim_;
  const std::unique_ptr<RowOptimizer> optimizer_;
  const int32_t state_floats_;
  const int32_t row_floats_;
  const uint32_t stripe_mask_;
  const absl::Time epoch_;
  std::vector<std::unique_ptr<Stripe>> stripes_;

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
  return std::unique_ptr<Table>(new MemoryTable(spec, std::move(options)));
}

}  // namespace embedps::embedding
