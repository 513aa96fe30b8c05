#include "embedding/values_table.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "embedding/initializer.h"
#include "embedding/internal/huge_page_allocator.h"
#include "embedding/internal/row_index_hash.h"

namespace embedps::embedding {
namespace {

using embedding_internal::StripeIndexOfHash;

// The stripe of a key: the training table's hash (a bijection of the
// key), whose bits 52 up pick it.
inline uint64_t KeyHash(uint64_t key) {
  return embedding_internal::TableKeyHash(key);
}

// The order a stripe keeps its keys in: the hash rotated so that the bits
// that pick the stripe (the same for all its keys) come last and its top
// bits, which pick a bucket, vary. A bijection too.
inline uint64_t OrderOfHash(uint64_t hash) {
  return (hash << 12) | (hash >> 52);
}
inline uint64_t KeyOrder(uint64_t key) { return OrderOfHash(KeyHash(key)); }

constexpr size_t kNotFound = SIZE_MAX;

// A stripe is rebuilt once its pending rows (holes included) and removed
// keys reach a quarter of its settled rows, and no sooner than this many.
constexpr size_t kMinRebuild = 1024;

// Position of the key of order `order` among keys[lo, hi), sorted by
// KeyOrder; or kNotFound. KeyOrder is a bijection: equal orders mean
// equal keys. Bisection down to a few keys, then a scan: O(log n) probes
// whatever the keys (a bucket holds ~8 of uniform hashes).
template <typename Keys>
size_t FindSorted(const Keys& keys, uint64_t order, size_t lo, size_t hi) {
  while (hi - lo > 8) {
    const size_t mid = lo + (hi - lo) / 2;
    if (KeyOrder(keys[mid]) <= order) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  for (size_t i = lo; i < hi; ++i) {
    const uint64_t at = KeyOrder(keys[i]);
    if (at >= order) return at == order ? i : kNotFound;
  }
  return kNotFound;
}

// A stripe's settled arrays: mapped from 64 KiB up, so that a rebuild's
// old arrays go back to the kernel when freed, not into holes of malloc's
// heap (a load rebuilds every stripe a few times).
template <typename T>
using Array =
    std::vector<T, embedding_internal::HugePageAllocator<T, size_t{64} << 10>>;

// A stripe's settled rows, sorted by KeyOrder: keys[i]'s floats at
// values[i · dim]. `starts` splits them into buckets by the hash's top
// bits (2^bits buckets, about 8 rows each: bucket b's rows are
// [starts[b], starts[b + 1])), so a search starts within a cache line or
// two of its key; half a byte to a byte a row.
struct Settled {
  Array<uint64_t> keys;
  Array<float> values;
  Array<uint32_t> starts;
  int bits = 0;

  size_t size() const { return keys.size(); }

  // The bucket of the key of hash `hash` (KeyHash).
  size_t Bucket(uint64_t hash) const {
    return bits == 0 ? 0
                     : static_cast<size_t>(OrderOfHash(hash) >> (64 - bits));
  }

  // The position of the key of hash `hash`, or kNotFound.
  size_t Find(uint64_t hash) const {
    if (keys.empty()) return kNotFound;
    const size_t bucket = Bucket(hash);
    return FindSorted(keys, OrderOfHash(hash), starts[bucket],
                      starts[bucket + 1]);
  }

  // Fills `starts` for the keys held.
  void Index() {
    bits = 0;
    while ((size_t{8} << bits) < keys.size()) ++bits;
    const size_t buckets = size_t{1} << bits;
    starts.assign(buckets + 1, 0);
    size_t i = 0;
    for (size_t b = 0; b <= buckets; ++b) {
      while (i < keys.size() &&
             (bits == 0 ? 0 : KeyOrder(keys[i]) >> (64 - bits)) < b) {
        ++i;
      }
      starts[b] = static_cast<uint32_t>(i);
    }
  }

  size_t bytes() const {
    return keys.capacity() * sizeof(uint64_t) +
           values.capacity() * sizeof(float) +
           starts.capacity() * sizeof(uint32_t);
  }
};

struct ValuesStripe {
  mutable Mutex mu;
  Settled settled ABSL_GUARDED_BY(mu);
  // Settled keys erased since the last rebuild.
  absl::flat_hash_set<uint64_t> removed ABSL_GUARDED_BY(mu);
  // Rows of keys that are not settled: key -> row of pending_values. Rows
  // of keys erased meanwhile stay as holes until the rebuild.
  absl::flat_hash_map<uint64_t, uint32_t> pending ABSL_GUARDED_BY(mu);
  Array<float> pending_values ABSL_GUARDED_BY(mu);
  uint64_t erased ABSL_GUARDED_BY(mu) = 0;
};

// A batch's positions grouped by stripe (a counting sort), per thread.
struct Grouping {
  std::vector<uint64_t> hashes;     // of keys[i]
  std::vector<uint32_t> order;      // positions, grouped by stripe
  std::vector<uint32_t> begin;      // stripe s: order[begin[s], begin[s + 1])
  std::vector<uint32_t> cursor;     // counting-sort insertion points
  std::vector<uint32_t> stripe_at;  // the stripe of order[j]
  std::vector<const float*> rows;   // Lookup: the row of order[j], or null
};

inline void Prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }

class ValuesTable final : public Table {
 public:
  explicit ValuesTable(const TableSpec& spec)
      : spec_(spec),
        dim_(static_cast<size_t>(spec.dim)),
        stripe_mask_(static_cast<uint32_t>(spec.num_stripes - 1)) {
    stripes_.reserve(spec.num_stripes);
    for (int32_t s = 0; s < spec.num_stripes; ++s) {
      stripes_.push_back(std::make_unique<ValuesStripe>());
    }
  }

  const TableSpec& spec() const override { return spec_; }

  absl::Status Pull(absl::Span<const uint64_t>, absl::Span<float>,
                    const AccessContext&) override {
    return Refused("Pull");
  }
  absl::Status Push(absl::Span<const uint64_t>, absl::Span<const float>,
                    const AccessContext&) override {
    return Refused("Push");
  }
  absl::StatusOr<uint64_t> ReadRecords(absl::Span<const uint64_t>,
                                       absl::Span<char>,
                                       absl::Span<bool>) override {
    return Refused("ReadRecords");
  }
  absl::StatusOr<uint64_t> WriteRecords(absl::Span<const uint64_t>,
                                        absl::Span<const char>,
                                        absl::Span<bool>,
                                        const AccessContext&) override {
    return Refused("WriteRecords");
  }
  absl::StatusOr<std::unique_ptr<TableSnapshot>> TakeSnapshot(bool) override {
    return Refused("TakeSnapshot");
  }
  absl::Status AdoptSpillFile(const std::string&, absl::Span<const uint64_t>,
                              absl::Span<const char>,
                              absl::Span<const uint64_t>) override {
    return Refused("AdoptSpillFile");
  }

  // Locks a set of stripes known at run time: beyond the annotations.
  absl::StatusOr<uint64_t> Lookup(
      absl::Span<const uint64_t> keys, absl::Span<float> values,
      absl::Span<bool> found,
      MissingRows missing) override ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (values.size() != keys.size() * dim_ || found.size() != keys.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", spec_.name, "': Lookup of ", keys.size(), " keys with ",
          values.size(), " values and ", found.size(),
          " found flags; expected ", keys.size() * dim_, " and ", keys.size()));
    }
    Grouping& grouping = Group(keys);
    uint64_t hits = 0;
    // Every stripe the batch touches is read-locked at once (in index
    // order; a writer never holds two stripes' locks, so this cannot
    // deadlock), and the batch goes through a pipeline of four stages
    // kAhead keys apart, each fetching what the next reads (the bucket's
    // start, its keys, the row), so that cache misses overlap.
    for (size_t s = 0; s < stripes_.size(); ++s) {
      if (grouping.begin[s] != grouping.begin[s + 1])
        stripes_[s]->mu.ReaderLock();
    }
    constexpr size_t kAhead = 8;
    const size_t n = keys.size();
    const auto settled_at = [&](size_t j) -> const Settled& {
      return stripes_[grouping.stripe_at[j]]->settled;
    };
    for (size_t j = 0; j < n + 3 * kAhead; ++j) {
      if (j < n) {
        const Settled& settled = settled_at(j);
        if (!settled.keys.empty()) {
          Prefetch(
              &settled
                   .starts[settled.Bucket(grouping.hashes[grouping.order[j]])]);
        }
      }
      if (j >= kAhead && j - kAhead < n) {
        const size_t at = j - kAhead;
        const Settled& settled = settled_at(at);
        if (!settled.keys.empty()) {
          Prefetch(&settled.keys[settled.starts[settled.Bucket(
              grouping.hashes[grouping.order[at]])]]);
        }
      }
      if (j >= 2 * kAhead && j - 2 * kAhead < n) {
        const size_t at = j - 2 * kAhead;
        const uint32_t i = grouping.order[at];
        const float* row = RowOf(*stripes_[grouping.stripe_at[at]], keys[i],
                                 grouping.hashes[i]);
        grouping.rows[at] = row;
        if (row != nullptr) {
          for (size_t b = 0; b < dim_ * sizeof(float); b += 64) {
            Prefetch(reinterpret_cast<const char*>(row) + b);
          }
        }
      }
      if (j >= 3 * kAhead && j - 3 * kAhead < n) {
        const size_t at = j - 3 * kAhead;
        const uint32_t i = grouping.order[at];
        const float* row = grouping.rows[at];
        found[i] = row != nullptr;
        if (row != nullptr) {
          std::memcpy(values.data() + i * dim_, row, dim_ * sizeof(float));
          ++hits;
        }
      }
    }
    for (size_t s = 0; s < stripes_.size(); ++s) {
      if (grouping.begin[s] != grouping.begin[s + 1]) {
        stripes_[s]->mu.ReaderUnlock();
      }
    }
    if (hits < keys.size()) {
      for (size_t i = 0; i < keys.size(); ++i) {
        if (found[i]) continue;
        const absl::Span<float> out = values.subspan(i * dim_, dim_);
        if (missing == MissingRows::kZeros) {
          std::fill(out.begin(), out.end(), 0.0f);
        } else {
          InitialRow(spec_.initializer, spec_.seed, keys[i], out);
        }
      }
    }
    looked_up_keys_.fetch_add(keys.size(), std::memory_order_relaxed);
    lookup_requests_.fetch_add(1, std::memory_order_relaxed);
    return hits;
  }

  absl::Status RestoreRows(absl::Span<const uint64_t> keys,
                           absl::Span<const char> records,
                           RestoredKeys) override {
    const size_t record_bytes = RowRecordBytes(spec_.dim, 0);
    if (records.size() != keys.size() * record_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table '", spec_.name, "': ", records.size(), " record bytes for ",
          keys.size(), " keys; a record has ", record_bytes));
    }
    WriteByStripe(keys, [&](ValuesStripe& stripe, uint32_t i, uint64_t hash)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
                              // A record is its metadata (8 bytes), then the
                              // floats.
                              Store(stripe, keys[i], hash,
                                    records.data() + i * record_bytes + 8);
                            });
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Erase(absl::Span<const uint64_t> keys) override {
    uint64_t erased = 0;
    WriteByStripe(keys, [&](ValuesStripe& stripe, uint32_t i, uint64_t hash)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
                              if (stripe.pending.erase(keys[i]) > 0 ||
                                  (stripe.settled.Find(hash) != kNotFound &&
                                   stripe.removed.insert(keys[i]).second)) {
                                ++stripe.erased;
                                ++erased;
                              }
                            });
    return erased;
  }

  absl::StatusOr<uint64_t> SweepExpired() override { return 0; }

  absl::Status Scan(
      absl::FunctionRef<void(const RowView&)> visit) const override {
    for (const auto& stripe_ptr : stripes_) {
      const ValuesStripe& stripe = *stripe_ptr;
      ReaderMutexLock lock(&stripe.mu);
      const Settled& settled = stripe.settled;
      for (size_t i = 0; i < settled.size(); ++i) {
        if (!stripe.removed.empty() &&
            stripe.removed.contains(settled.keys[i])) {
          continue;
        }
        visit(View(settled.keys[i], settled.values.data() + i * dim_));
      }
      for (const auto& [key, row] : stripe.pending) {
        visit(View(key, stripe.pending_values.data() + size_t{row} * dim_));
      }
    }
    return absl::OkStatus();
  }

  TableStats Stats() const override {
    TableStats stats;
    for (const auto& stripe_ptr : stripes_) {
      const ValuesStripe& stripe = *stripe_ptr;
      ReaderMutexLock lock(&stripe.mu);
      stats.rows +=
          stripe.settled.size() - stripe.removed.size() + stripe.pending.size();
      stats.resident_bytes +=
          sizeof(ValuesStripe) + stripe.settled.bytes() +
          stripe.pending_values.capacity() * sizeof(float) +
          stripe.pending.capacity() *
              (sizeof(std::pair<uint64_t, uint32_t>) + 1) +
          stripe.removed.capacity() * (sizeof(uint64_t) + 1);
      stats.erased += stripe.erased;
    }
    stats.resident_rows = stats.rows;
    stats.resident_bytes += sizeof(*this);
    stats.payload_bytes = stats.rows * dim_ * sizeof(float);
    stats.memory_budget_bytes = spec_.memory_budget_bytes;
    stats.over_budget = spec_.memory_budget_bytes > 0 &&
                        stats.resident_bytes > spec_.memory_budget_bytes;
    stats.looked_up_keys = looked_up_keys_.load(std::memory_order_relaxed);
    stats.lookup_requests = lookup_requests_.load(std::memory_order_relaxed);
    return stats;
  }

  void ReleaseUnusedMemory() override {
    MutexLock writing(&writer_mu_);
    for (auto& stripe : stripes_) MaybeRebuild(*stripe, /*always=*/true);
  }

  uint32_t StripeOfKey(uint64_t key) const override {
    return StripeIndexOfHash(KeyHash(key), stripe_mask_);
  }

  bool spills() const override { return false; }
  void EnableChangeLog() override {}
  std::vector<uint64_t> TakeChangedKeys() override { return {}; }
  absl::Status MergeAdmissionStates(const std::vector<std::string>&) override {
    return absl::OkStatus();
  }

 private:
  absl::Status Refused(absl::string_view what) const {
    return absl::FailedPreconditionError(absl::StrCat(
        "table '", spec_.name,
        "' holds served values only (a serving replica's): no ", what));
  }

  RowView View(uint64_t key, const float* row) const {
    return RowView{key, absl::MakeConstSpan(row, dim_), {}, 0, 0};
  }

  // The row of `key` in `stripe`, or null.
  const float* RowOf(const ValuesStripe& stripe, uint64_t key,
                     uint64_t hash) const
      ABSL_SHARED_LOCKS_REQUIRED(stripe.mu) {
    if (!stripe.pending.empty()) {
      auto it = stripe.pending.find(key);
      if (it != stripe.pending.end()) {
        return stripe.pending_values.data() + size_t{it->second} * dim_;
      }
    }
    const size_t at = stripe.settled.Find(hash);
    if (at == kNotFound) return nullptr;
    if (!stripe.removed.empty() && stripe.removed.contains(key)) return nullptr;
    return stripe.settled.values.data() + at * dim_;
  }

  // Writes `floats` (dim unaligned floats) as the row of `key`.
  void Store(ValuesStripe& stripe, uint64_t key, uint64_t hash,
             const char* floats) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stripe.mu) {
    const size_t bytes = dim_ * sizeof(float);
    if (!stripe.pending.empty()) {
      auto it = stripe.pending.find(key);
      if (it != stripe.pending.end()) {
        std::memcpy(stripe.pending_values.data() + size_t{it->second} * dim_,
                    floats, bytes);
        return;
      }
    }
    if (const size_t at = stripe.settled.Find(hash); at != kNotFound) {
      std::memcpy(stripe.settled.values.data() + at * dim_, floats, bytes);
      if (!stripe.removed.empty()) stripe.removed.erase(key);
      return;
    }
    const size_t row = stripe.pending_values.size() / dim_;
    stripe.pending.emplace(key, static_cast<uint32_t>(row));
    stripe.pending_values.resize((row + 1) * dim_);
    std::memcpy(stripe.pending_values.data() + row * dim_, floats, bytes);
  }

  // A write of `keys`: under the writer lock, for each stripe with keys
  // of the batch, work(stripe, i, hash of keys[i]) for each of them under
  // the stripe's lock, then the stripe rebuilt if its changes are due.
  template <typename Work>
  void WriteByStripe(absl::Span<const uint64_t> keys, Work&& work) {
    MutexLock writing(&writer_mu_);
    const Grouping& grouping = Group(keys);
    for (size_t s = 0; s < stripes_.size(); ++s) {
      const uint32_t begin = grouping.begin[s];
      const uint32_t end = grouping.begin[s + 1];
      if (begin == end) continue;
      ValuesStripe& stripe = *stripes_[s];
      {
        MutexLock lock(&stripe.mu);
        for (uint32_t j = begin; j < end; ++j) {
          const uint32_t i = grouping.order[j];
          work(stripe, i, grouping.hashes[i]);
        }
      }
      MaybeRebuild(stripe, /*always=*/false);
    }
  }

  // Merges the stripe's pending rows in and its removed keys out, if they
  // reach the threshold (or any, with `always`): the merged arrays are
  // built under the stripe's lock held shared (Lookups go on; the writer
  // lock keeps other writers out), then swapped in under it held
  // exclusively.
  void MaybeRebuild(ValuesStripe& stripe, bool always)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_) {
    Settled merged;
    {
      ReaderMutexLock lock(&stripe.mu);
      const Settled& settled = stripe.settled;
      const size_t changes =
          stripe.pending_values.size() / dim_ + stripe.removed.size();
      if (changes == 0 ||
          (!always && changes < std::max(kMinRebuild, settled.size() / 4))) {
        return;
      }
      struct Incoming {
        uint64_t order;
        uint64_t key;
        uint32_t row;
      };
      std::vector<Incoming> incoming;
      incoming.reserve(stripe.pending.size());
      for (const auto& [key, row] : stripe.pending) {
        incoming.push_back({KeyOrder(key), key, row});
      }
      std::sort(incoming.begin(), incoming.end(),
                [](const Incoming& a, const Incoming& b) {
                  return a.order < b.order;
                });
      const size_t rows =
          settled.size() - stripe.removed.size() + incoming.size();
      merged.keys.resize(rows);
      merged.values.resize(rows * dim_);
      size_t out = 0;
      size_t next_settled = 0;
      const auto emit = [&](uint64_t key, const float* row) {
        merged.keys[out] = key;
        std::memcpy(merged.values.data() + out * dim_, row,
                    dim_ * sizeof(float));
        ++out;
      };
      const auto emit_settled_below = [&](uint64_t order) {
        for (; next_settled < settled.size() &&
               KeyOrder(settled.keys[next_settled]) < order;
             ++next_settled) {
          const uint64_t key = settled.keys[next_settled];
          if (!stripe.removed.empty() && stripe.removed.contains(key)) {
            continue;
          }
          emit(key, settled.values.data() + next_settled * dim_);
        }
      };
      for (const Incoming& next : incoming) {
        emit_settled_below(next.order);
        emit(next.key, stripe.pending_values.data() + size_t{next.row} * dim_);
      }
      emit_settled_below(UINT64_MAX);
      if (next_settled < settled.size()) {  // a key of order UINT64_MAX
        const uint64_t key = settled.keys[next_settled];
        if (stripe.removed.empty() || !stripe.removed.contains(key)) {
          emit(key, settled.values.data() + next_settled * dim_);
        }
      }
      merged.Index();
    }
    MutexLock lock(&stripe.mu);
    std::swap(stripe.settled, merged);
    // Move-assigned from empty ones: their memory goes (`= {}` would keep
    // a vector's capacity).
    stripe.pending = decltype(stripe.pending)();
    stripe.pending_values = Array<float>();
    stripe.removed = decltype(stripe.removed)();
    // The old arrays are freed as `merged` goes, after the lock.
  }

  const TableSpec spec_;
  const size_t dim_;
  const uint32_t stripe_mask_;
  std::vector<std::unique_ptr<ValuesStripe>> stripes_;
  // One writer at a time.
  Mutex writer_mu_;
  std::atomic<uint64_t> looked_up_keys_{0};
  std::atomic<uint64_t> lookup_requests_{0};

  // Groups `keys` by stripe into the calling thread's scratch.
  Grouping& Group(absl::Span<const uint64_t> keys) const {
    thread_local Grouping grouping;
    grouping.rows.resize(keys.size());
    const size_t stripes = stripes_.size();
    grouping.hashes.resize(keys.size());
    grouping.order.resize(keys.size());
    grouping.begin.assign(stripes + 1, 0);
    for (size_t i = 0; i < keys.size(); ++i) {
      grouping.hashes[i] = KeyHash(keys[i]);
      ++grouping.begin[StripeIndexOfHash(grouping.hashes[i], stripe_mask_) + 1];
    }
    for (size_t s = 0; s < stripes; ++s) {
      grouping.begin[s + 1] += grouping.begin[s];
    }
    std::vector<uint32_t>& cursor = grouping.cursor;
    cursor.assign(grouping.begin.begin(), grouping.begin.end() - 1);
    grouping.stripe_at.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t s = StripeIndexOfHash(grouping.hashes[i], stripe_mask_);
      grouping.stripe_at[cursor[s]] = s;
      grouping.order[cursor[s]++] = static_cast<uint32_t>(i);
    }
    return grouping;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<Table>> CreateValuesTable(
    const TableSpec& spec) {
  RETURN_IF_ERROR(ValidateTableSpec(spec));
  if (OptimizerStateFloats(spec.optimizer, spec.dim) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table '", spec.name,
                     "': a values table keeps no optimizer state; its "
                     "optimizer must have none (e.g. SGD)"));
  }
  return std::unique_ptr<Table>(new ValuesTable(spec));
}

}  // namespace embedps::embedding
