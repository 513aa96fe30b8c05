#include "embedding/internal/table_core.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "common/key_hash.h"
#include "common/status_macros.h"
#include "embedding/admission.h"
#include "embedding/internal/spill_policy.h"

namespace embedps::embedding_internal {

int32_t ArenaRowFloats(int32_t dim, int32_t state_floats) {
  return (kHeaderFloats + dim + state_floats + 3) & ~3;
}

uint64_t ExpectedRowsPerStripe(const TableSpec& spec, uint64_t cap) {
  if (spec.expected_rows == 0) return 0;
  const uint64_t stripes = static_cast<uint64_t>(spec.num_stripes);
  const uint64_t share = (spec.expected_rows + stripes - 1) / stripes;
  // A binomial share's standard deviation is about its square root.
  const double deviation = std::sqrt(static_cast<double>(share));
  const uint64_t slack = 4 * static_cast<uint64_t>(std::ceil(deviation)) + 16;
  return std::min({share + slack, kMaxRowsPerStripe, cap});
}

absl::Status TableCore::CommitExpectedRows() {
  const uint64_t rows = ExpectedRowsPerStripe(spec, max_resident_per_stripe);
  if (rows == 0) return absl::OkStatus();
  for (auto& stripe : stripes) {
    MutexLock lock(&stripe->mu);
    RETURN_IF_ERROR(stripe->Prepare(rows));
  }
  return absl::OkStatus();
}

BatchScratch& ThreadScratch(Scratch which) {
  thread_local BatchScratch scratch[2];
  return scratch[static_cast<int>(which)];
}

TableCore::TableCore(const TableSpec& table_spec, TableOptions table_options,
                     std::unique_ptr<SpillStore> spill_store)
    : spec(table_spec),
      options(std::move(table_options)),
      dim(table_spec.dim),
      optimizer(embedding::RowOptimizer::Create(table_spec.optimizer,
                                                table_spec.dim)),
      state_floats(optimizer->state_floats()),
      row_floats(ArenaRowFloats(dim, state_floats)),
      stripe_mask(static_cast<uint32_t>(table_spec.num_stripes - 1)),
      record_bytes(embedding::RowRecordBytes(dim, state_floats)),
      epoch(options.clock()),
      spill(std::move(spill_store)) {
  stripes.reserve(spec.num_stripes);
  // Huge pages, unless a stripe's share of a spilling table's budget is
  // small enough that its last, partly used huge page (up to 2 MiB) would
  // be more than ~3% of it.
  const bool huge_pages =
      spill == nullptr ||
      spec.memory_budget_bytes / spec.num_stripes >= (uint64_t{64} << 20);
  for (int32_t s = 0; s < spec.num_stripes; ++s) {
    stripes.push_back(std::make_unique<Stripe>(
        row_floats, huge_pages,
        embedding::AdmissionFilter::Create(
            spec.admission, MixPair(spec.seed, s), spec.num_stripes)));
  }
  if (spill == nullptr) return;
  const SpillBudget budget =
      PlanSpillBudget(spec, row_floats, stripes[0]->AdmissionBytesUnlocked(),
                      PlanSpillReserve(spec.memory_budget_bytes,
                                       options.spill_block_cache_bytes));
  max_resident_per_stripe = budget.max_resident_per_stripe;
  max_tracked_keys_per_stripe = budget.max_tracked_keys_per_stripe;
  for (auto& stripe : stripes) {
    MutexLock lock(&stripe->mu);
    stripe->spill().frequency = std::make_unique<CountMinSketch>(
        budget.sketch_width, budget.sketch_sample);
  }
}

BatchScratch& TableCore::GroupByStripe(absl::Span<const uint64_t> keys,
                                       BatchScratch& scratch) const {
  const size_t n = keys.size();
  const size_t count = stripes.size();
  scratch.order.resize(n);
  scratch.hashes.resize(n);
  scratch.rows.resize(n);
  scratch.group_begin.assign(count + 1, 0);
  scratch.position_hashes.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t hash = KeyHash(keys[i]);
    scratch.position_hashes[i] = hash;
    ++scratch.group_begin[StripeIndex(hash) + 1];
  }
  for (size_t s = 0; s < count; ++s) {
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

uint64_t TableCore::SecondsSinceEpoch() const {
  const int64_t s = absl::ToInt64Seconds(options.clock() - epoch);
  return s < 0 ? 0 : static_cast<uint64_t>(s);
}

uint32_t TableCore::Touch(const AccessContext& context) {
  if (spec.eviction.ttl_unit == embedding::EvictionSpec::TtlUnit::kSeconds) {
    return static_cast<uint32_t>(
        std::min<uint64_t>(SecondsSinceEpoch(), kMaxTouch));
  }
  uint64_t latest = latest_step.load(std::memory_order_relaxed);
  while (context.step > latest &&
         !latest_step.compare_exchange_weak(latest, context.step,
                                            std::memory_order_relaxed)) {
  }
  return static_cast<uint32_t>(std::min<uint64_t>(context.step, kMaxTouch));
}

std::vector<uint64_t> SortedUnique(absl::Span<const uint64_t> keys) {
  std::vector<uint64_t> unique(keys.begin(), keys.end());
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  return unique;
}

std::vector<uint64_t> KeysAt(absl::Span<const uint64_t> keys,
                             absl::Span<const uint32_t> positions) {
  std::vector<uint64_t> at(positions.size());
  for (size_t i = 0; i < positions.size(); ++i) at[i] = keys[positions[i]];
  return at;
}

}  // namespace embedps::embedding_internal
