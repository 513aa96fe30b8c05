#include "embedding/table.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/process_memory.h"
#include "common/status_matchers.h"
#include "embedding/initializer.h"
#include "embedding/internal/row_index_hash.h"
#include "embedding/table_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

INSTANTIATE_TEST_SUITE_P(MemoryAndSpill, TableContractTest,
                         ::testing::Values(false, true), TierName);

// Erase and SweepExpired fail only on spill-tier errors.
uint64_t Value(absl::StatusOr<uint64_t> result) {
  EXPECT_OK(result.status());
  return result.ok() ? *result : 0;
}

std::vector<float> PullOne(Table& table, uint64_t key) {
  std::vector<float> row(table.spec().dim);
  EXPECT_OK(table.Pull({key}, absl::MakeSpan(row)));
  return row;
}

TEST_P(TableContractTest, PullCreatesRowsWithTheirInitialValues) {
  const TableSpec spec = SgdSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<uint64_t> keys = {0, 1, 42, ~uint64_t{0}, 1ull << 63};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(std::vector<float>(values.begin() + k * kDim,
                                 values.begin() + (k + 1) * kDim),
              InitialOf(spec, keys[k]));
  }
  const TableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, keys.size());
  EXPECT_EQ(stats.admitted, keys.size());
  EXPECT_EQ(stats.pulled_keys, keys.size());
  EXPECT_EQ(stats.pull_requests, 1u);
}

TEST_P(TableContractTest, PullReturnsDuplicatesAndKeepsOrder) {
  const TableSpec spec = SgdSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<uint64_t> keys = {9, 3, 9, 9, 3, 77};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  for (size_t k = 0; k < keys.size(); ++k) {
    EXPECT_EQ(std::vector<float>(values.begin() + k * kDim,
                                 values.begin() + (k + 1) * kDim),
              InitialOf(spec, keys[k]));
  }
  EXPECT_EQ(table->Stats().rows, 3u);
}

TEST_P(TableContractTest, PushAppliesSgdExactly) {
  const TableSpec spec = SgdSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<float> before = PullOne(*table, 12);
  std::vector<float> grad(kDim);
  for (int d = 0; d < kDim; ++d) grad[d] = 0.25f * d;
  ASSERT_OK(table->Push({12}, grad));
  const std::vector<float> after = PullOne(*table, 12);
  for (int d = 0; d < kDim; ++d)
    EXPECT_EQ(after[d], before[d] - 0.5f * grad[d]);
}

// Two keys whose row-index slots look alike to a lookup by fingerprint
// (the same 8-bit IndexFingerprint and the same low 7 bits absl keeps), in
// a one-stripe table small enough that both sit in one index group: a
// Pull or Push of one may find the other's slot first and must then look
// its key up exactly. Found by a birthday search (a few hundred keys).
TEST_P(TableContractTest, KeysWithTheSameIndexFingerprintKeepTheirOwnRows) {
  absl::flat_hash_map<uint64_t, uint64_t> key_of_signature;
  uint64_t first = 0, second = 0;
  for (uint64_t key = 1; key < (uint64_t{1} << 24) && second == 0; ++key) {
    const uint64_t hash = embedding_internal::TableKeyHash(key);
    const uint64_t signature =
        (uint64_t{embedding_internal::IndexFingerprint(hash)} << 7) |
        (hash & 0x7f);
    auto [it, inserted] = key_of_signature.try_emplace(signature, key);
    if (!inserted) {
      first = it->second;
      second = key;
    }
  }
  ASSERT_NE(second, 0u) << "no colliding pair among 2^24 keys";
  TableSpec spec = SgdSpec();
  spec.num_stripes = 1;
  const std::vector<float> first_initial = InitialOf(spec, first);
  const std::vector<float> second_initial = InitialOf(spec, second);
  std::vector<float> first_grad(kDim), second_grad(kDim);
  for (int d = 0; d < kDim; ++d) {
    first_grad[d] = 1.0f + d;
    second_grad[d] = -2.0f - d;
  }
  // Both orders of creation: whichever slot comes first in the group, the
  // other key's lookup meets it.
  for (const bool first_created_first : {true, false}) {
    SCOPED_TRACE(first_created_first ? "first created first"
                                     : "second created first");
    ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
    if (first_created_first) {
      PullOne(*table, first);
      PullOne(*table, second);
    } else {
      PullOne(*table, second);
      PullOne(*table, first);
    }
    // One Push naming both, then each alone: the batch path and the
    // single-key path both find their own rows.
    std::vector<float> grads(first_grad);
    grads.insert(grads.end(), second_grad.begin(), second_grad.end());
    ASSERT_OK(table->Push({{first, second}}, grads));
    ASSERT_OK(table->Push({second}, second_grad));
    std::vector<float> both(2 * kDim);
    ASSERT_OK(table->Pull({{second, first}}, absl::MakeSpan(both)));
    for (int d = 0; d < kDim; ++d) {
      EXPECT_EQ(both[kDim + d], first_initial[d] - 0.5f * first_grad[d]) << d;
      const float once = second_initial[d] - 0.5f * second_grad[d];
      EXPECT_EQ(both[d], once - 0.5f * second_grad[d]) << d;
    }
    EXPECT_EQ(PullOne(*table, first),
              std::vector<float>(both.begin() + kDim, both.end()));
  }
}

// Adagrad distinguishes "one update with the summed gradient" from "two
// updates": a+=(g1+g2)² then one step, versus two steps.
TEST_P(TableContractTest, DuplicateKeysInOnePushAreSummedAndAppliedOnce) {
  TableSpec spec = SgdSpec();
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  spec.optimizer.learning_rate = 0.1f;
  ASSERT_OK_AND_ASSIGN(auto with_duplicates, MakeTable(spec));
  ASSERT_OK_AND_ASSIGN(auto pre_summed, MakeTable(spec));

  const std::vector<uint64_t> dup_keys = {5, 6, 5, 5};
  std::vector<float> dup_grads(dup_keys.size() * kDim);
  for (size_t i = 0; i < dup_grads.size(); ++i)
    dup_grads[i] = 0.01f * (i % 7 + 1);
  ASSERT_OK(with_duplicates->Push(dup_keys, dup_grads));

  std::vector<float> summed(2 * kDim, 0.0f);
  for (int d = 0; d < kDim; ++d) {
    summed[d] = dup_grads[0 * kDim + d] + dup_grads[2 * kDim + d] +
                dup_grads[3 * kDim + d];
    summed[kDim + d] = dup_grads[1 * kDim + d];
  }
  ASSERT_OK(pre_summed->Push({{5, 6}}, summed));

  EXPECT_EQ(PullOne(*with_duplicates, 5), PullOne(*pre_summed, 5));
  EXPECT_EQ(PullOne(*with_duplicates, 6), PullOne(*pre_summed, 6));
  EXPECT_EQ(with_duplicates->Stats().rows, 2u);
}

TEST_P(TableContractTest, ManyRowsAcrossChunksAndRehashesKeepTheirValues) {
  // Without a hint, with one that covers the rows, and one far too small:
  // expected_rows changes where memory is taken, never what rows hold.
  for (uint64_t expected_rows : {0, 50000, 1000}) {
    SCOPED_TRACE(absl::StrCat("expected_rows ", expected_rows));
    TableSpec spec = SgdSpec();
    spec.num_stripes = 4;
    spec.expected_rows = expected_rows;
    ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
    constexpr int kKeys = 50000;
    std::vector<uint64_t> keys(kKeys);
    std::mt19937_64 rng(3);
    for (auto& k : keys) k = rng();
    std::vector<float> values(keys.size() * kDim);
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
    std::vector<float> grads(keys.size() * kDim);
    for (size_t i = 0; i < grads.size(); ++i) grads[i] = (i % 5) * 0.125f;
    ASSERT_OK(table->Push(keys, grads));
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
    for (int k = 0; k < kKeys; k += 997) {
      const std::vector<float> init = InitialOf(spec, keys[k]);
      for (int d = 0; d < kDim; ++d) {
        ASSERT_EQ(values[k * kDim + d], init[d] - 0.5f * grads[k * kDim + d]);
      }
    }
    EXPECT_EQ(table->Stats().rows, static_cast<uint64_t>(kKeys));
  }
}

TEST_P(TableContractTest, LookupIsReadOnlyAndReportsMisses) {
  const TableSpec spec = SgdSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<float> row = PullOne(*table, 1);
  std::vector<float> values(3 * kDim, -1.0f);
  bool found[3];
  ASSERT_OK_AND_ASSIGN(
      uint64_t hits,
      table->Lookup({{1, 2, 1}}, absl::MakeSpan(values), absl::MakeSpan(found),
                    Table::MissingRows::kZeros));
  EXPECT_EQ(hits, 2u);
  EXPECT_TRUE(found[0]);
  EXPECT_FALSE(found[1]);
  EXPECT_TRUE(found[2]);
  EXPECT_EQ(std::vector<float>(values.begin(), values.begin() + kDim), row);
  for (int d = 0; d < kDim; ++d) EXPECT_EQ(values[kDim + d], 0.0f);
  const TableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, 1u);  // the miss created nothing
  EXPECT_EQ(stats.looked_up_keys, 3u);
}

TEST_P(TableContractTest, LookupCanAnswerMissesWithInitialValues) {
  TableSpec spec = SgdSpec();
  spec.admission.kind = AdmissionSpec::Kind::kCount;
  spec.admission.min_count = 3;
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  // Key 1 has a row (admitted after 3 sightings) that a push moved away
  // from its initial values; key 2 has none.
  for (int i = 0; i < 3; ++i) PullOne(*table, 1);
  const std::vector<float> grad(kDim, 1.0f);
  ASSERT_OK(table->Push({1}, grad));
  const std::vector<float> trained = PullOne(*table, 1);
  ASSERT_NE(trained, InitialOf(spec, 1));
  const TableStats before = table->Stats();
  std::vector<float> values(2 * kDim, -1.0f);
  bool found[2];
  ASSERT_OK_AND_ASSIGN(
      uint64_t hits,
      table->Lookup({{1, 2}}, absl::MakeSpan(values), absl::MakeSpan(found),
                    Table::MissingRows::kInitialValues));
  EXPECT_EQ(hits, 1u);
  EXPECT_EQ(std::vector<float>(values.begin(), values.begin() + kDim), trained);
  EXPECT_EQ(std::vector<float>(values.begin() + kDim, values.end()),
            InitialOf(spec, 2));
  // Not a sighting: key 2 is not closer to admission, nothing was created.
  const TableStats after = table->Stats();
  EXPECT_EQ(after.rows, before.rows);
  EXPECT_EQ(after.admission_rejected, before.admission_rejected);
  for (int i = 0; i < 2; ++i) PullOne(*table, 2);
  EXPECT_EQ(table->Stats().rows, before.rows) << "two sightings, not three";
}

TEST_P(TableContractTest, ChangeLogNamesEveryChangedRowOnce) {
  const TableSpec spec = SgdSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  PullOne(*table, 1);  // before the log: not logged
  EXPECT_TRUE(table->TakeChangedKeys().empty());
  table->EnableChangeLog();
  PullOne(*table, 1);  // read only: no change
  EXPECT_TRUE(table->TakeChangedKeys().empty());
  PullOne(*table, 7);  // created
  const std::vector<float> grad(2 * kDim, 0.5f);
  ASSERT_OK(table->Push({{1, 1}}, grad));  // updated (twice in one batch)
  ASSERT_OK(table->Push({99}, absl::MakeConstSpan(grad).subspan(0, kDim)));
  // Key 99 had no row: admission kAlways creates it on the push.
  EXPECT_EQ(table->TakeChangedKeys(), (std::vector<uint64_t>{1, 7, 99}));
  EXPECT_TRUE(table->TakeChangedKeys().empty()) << "the log starts over";
  ASSERT_OK_AND_ASSIGN(uint64_t erased, table->Erase({7}));
  EXPECT_EQ(erased, 1u);
  ASSERT_OK(table->Push({1}, absl::MakeConstSpan(grad).subspan(0, kDim)));
  EXPECT_EQ(table->TakeChangedKeys(), (std::vector<uint64_t>{1, 7}));
}

TEST_P(TableContractTest, EraseRemovesRowsAndFreedRowsAreReused) {
  const TableSpec spec = SgdSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  std::vector<uint64_t> keys(1000);
  for (int i = 0; i < 1000; ++i) keys[i] = i;
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  const uint64_t bytes_full = table->Stats().resident_bytes;
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  ASSERT_OK(table->Push(keys, grads));

  EXPECT_EQ(Value(table->Erase(absl::MakeConstSpan(keys).subspan(0, 500))),
            500u);
  EXPECT_EQ(Value(table->Erase({{0, 1, 999999}})),
            0u);  // already gone / never there
  EXPECT_EQ(table->Stats().rows, 500u);
  EXPECT_EQ(table->Stats().erased, 500u);

  // An erased key comes back fresh, in a reused row: no new memory.
  std::vector<uint64_t> other(500);
  for (int i = 0; i < 500; ++i) other[i] = 100000 + i;
  ASSERT_OK(table->Pull(other, absl::MakeSpan(values).subspan(0, 500 * kDim)));
  EXPECT_EQ(PullOne(*table, 3), InitialOf(spec, 3));
  EXPECT_LE(table->Stats().resident_bytes, bytes_full + 64 * 1024);
}

TEST_P(TableContractTest, ScanVisitsEveryRowOnceWithItsState) {
  TableSpec spec = SgdSpec();
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  std::vector<uint64_t> keys(3000);
  for (int i = 0; i < 3000; ++i) keys[i] = i * 7919;
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values), AccessContext{4}));
  EXPECT_EQ(Value(table->Erase({0})), 1u);
  std::map<uint64_t, int> visits;
  ASSERT_OK(table->Scan([&](const RowView& row) {
    ++visits[row.key];
    EXPECT_EQ(row.embedding.size(), static_cast<size_t>(kDim));
    EXPECT_EQ(row.optimizer_state.size(), static_cast<size_t>(kDim));
    EXPECT_EQ(row.access_count, 1u);
    EXPECT_EQ(row.last_touch, 4u);
  }));
  EXPECT_EQ(visits.size(), 2999u);
  for (const auto& [key, count] : visits) EXPECT_EQ(count, 1) << key;
  EXPECT_EQ(visits.count(0), 0u);
}

TEST_P(TableContractTest, BadInputIsRefusedAndChangesNothing) {
  const TableSpec spec = SgdSpec("bad_input");
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<float> before = PullOne(*table, 1);
  const std::vector<uint64_t> keys = {1, 2};
  std::vector<float> too_few(2 * kDim - 1);
  std::vector<float> too_many(3 * kDim);
  std::vector<float> odd(2 * kDim + 3);

  EXPECT_THAT(table->Pull(keys, absl::MakeSpan(too_few)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("2 keys need 16 values (dim 8), got 15")));
  EXPECT_THAT(table->Push(keys, too_many),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("got 24 (3 rows)")));
  EXPECT_THAT(table->Push(keys, odd),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a multiple of dim")));
  bool found[1];
  std::vector<float> values(2 * kDim);
  EXPECT_THAT(
      table->Lookup(keys, absl::MakeSpan(values), absl::MakeSpan(found),
                    Table::MissingRows::kZeros),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("found flags")));

  // NaN or Inf anywhere refuses the whole Push: key 1's valid gradient is
  // not applied either.
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> grads(2 * kDim, 1.0f);
    grads[kDim + 3] = bad;
    EXPECT_THAT(
        table->Push(keys, grads),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("gradient of key 2 (batch position 1, element 3)")));
  }
  EXPECT_EQ(PullOne(*table, 1), before);
  const TableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, 1u);  // key 2 was never created
  EXPECT_EQ(stats.push_requests, 0u);

  // Empty batches are fine and do nothing.
  EXPECT_OK(table->Pull({}, {}));
  EXPECT_OK(table->Push({}, {}));
  EXPECT_THAT(table->Lookup({}, {}, {}, Table::MissingRows::kZeros),
              ::embedps::testing::IsOk());
  EXPECT_EQ(Value(table->Erase({})), 0u);
  EXPECT_EQ(table->Stats().rows, 1u);
}

// Finite gradients that would overflow a row refuse the whole Push: every
// row it updated before the overflow is put back, bit for bit, across
// stripes and tiers, and rows it created (kAlways) are removed again.
TEST_P(TableContractTest, PushThatWouldMakeARowNonFiniteChangesNothing) {
  for (const OptimizerSpec::Kind kind :
       {OptimizerSpec::Kind::kSgd, OptimizerSpec::Kind::kAdagrad}) {
    TableSpec spec = SgdSpec(kind == OptimizerSpec::Kind::kSgd ? "sgd" : "ada");
    spec.optimizer.kind = kind;
    spec.optimizer.learning_rate = 10.0f;
    spec.admission.kind = AdmissionSpec::Kind::kAlways;
    ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
    // 300 keys over every stripe; each gets a valid update first.
    std::vector<uint64_t> keys;
    for (uint64_t k = 1; k <= 300; ++k) keys.push_back(k * 7919);
    std::vector<float> grads(keys.size() * kDim, 0.25f);
    ASSERT_OK(table->Push(keys, grads));
    std::vector<float> before(keys.size() * kDim);
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(before)));
    const uint64_t rows_before = table->Stats().rows;

    // Key 299's gradient overflows: SGD's row (w - 10·3e38) and Adagrad's
    // accumulator (g² = 9e76) become infinite. Keys 5 and 6 are new. Key
    // 17 repeats.
    std::vector<uint64_t> push_keys = keys;
    push_keys.push_back(5);
    push_keys.push_back(6);
    push_keys.push_back(keys[17]);
    std::vector<float> push_grads(push_keys.size() * kDim, 1.5f);
    push_grads[298 * kDim + 2] = 3e38f;
    EXPECT_THAT(table->Push(push_keys, push_grads),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(absl::StrCat("key ", keys[298])),
                               HasSubstr("nothing was applied"))));

    std::vector<float> after(keys.size() * kDim);
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(after)));
    EXPECT_EQ(after, before) << spec.name;
    EXPECT_EQ(table->Stats().rows, rows_before) << spec.name;
    bool found[2];
    std::vector<float> values(2 * kDim);
    EXPECT_EQ(
        Value(table->Lookup({5, 6}, absl::MakeSpan(values),
                            absl::MakeSpan(found), Table::MissingRows::kZeros)),
        0u)
        << spec.name;

    // The same Push without the overflow applies in full.
    push_grads[298 * kDim + 2] = 1.5f;
    ASSERT_OK(table->Push(push_keys, push_grads));
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(after)));
    EXPECT_NE(after, before);
    EXPECT_EQ(table->Stats().rows, rows_before + 2) << spec.name;
  }
}

// Small gradients can overflow rows that already hold huge values (here
// through a huge learning rate): once a row held a value beyond 2^64 every
// Push is logged, so such a Push is taken back whole too.
TEST_P(TableContractTest, PushOfSmallGradientsOnHugeRowsIsTakenBackWhole) {
  TableSpec spec = SgdSpec("huge");
  spec.optimizer.learning_rate = 1e34f;
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  std::vector<uint64_t> keys;
  for (uint64_t k = 1; k <= 300; ++k) keys.push_back(k * 7919);
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  std::vector<float> grads(keys.size() * kDim, 1.0f);
  ASSERT_OK(table->Push(keys, grads));  // every value now about -1e34
  std::vector<float> before(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(before)));
  grads[298 * kDim] = 40000.0f;  // -1e34 - 1e34 * 4e4 = -inf
  EXPECT_THAT(table->Push(keys, grads),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat("key ", keys[298])),
                             HasSubstr("nothing was applied"))));
  std::vector<float> after(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(after)));
  EXPECT_EQ(after, before);
}

TEST_P(TableContractTest, TtlInStepsEvictsUntouchedRows) {
  TableSpec spec = SgdSpec();
  spec.eviction.ttl = 10;
  spec.eviction.ttl_unit = EvictionSpec::TtlUnit::kSteps;
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  std::vector<float> v(2 * kDim);
  ASSERT_OK(table->Pull({{1, 2}}, absl::MakeSpan(v), AccessContext{100}));
  std::vector<float> g(kDim, 1.0f);
  ASSERT_OK(table->Push({2}, g, AccessContext{105}));  // a push touches too
  ASSERT_OK(
      table->Pull({3}, absl::MakeSpan(v).subspan(0, kDim), AccessContext{110}));
  EXPECT_EQ(Value(table->SweepExpired()), 0u);  // 110-100 is not > 10
  ASSERT_OK(
      table->Pull({3}, absl::MakeSpan(v).subspan(0, kDim), AccessContext{111}));
  EXPECT_EQ(Value(table->SweepExpired()), 1u);  // key 1
  bool found[3];
  std::vector<float> lv(3 * kDim);
  ASSERT_OK_AND_ASSIGN(
      uint64_t hits,
      table->Lookup({{1, 2, 3}}, absl::MakeSpan(lv), absl::MakeSpan(found),
                    Table::MissingRows::kZeros));
  EXPECT_EQ(hits, 2u);
  EXPECT_FALSE(found[0]);
  EXPECT_EQ(table->Stats().evicted, 1u);
  ASSERT_OK(
      table->Pull({3}, absl::MakeSpan(v).subspan(0, kDim), AccessContext{200}));
  EXPECT_EQ(Value(table->SweepExpired()), 1u);  // key 2 (touched at 105)
  EXPECT_EQ(table->Stats().rows, 1u);
}

TEST_P(TableContractTest, TtlInSecondsUsesTheClock) {
  TableSpec spec = SgdSpec();
  spec.eviction.ttl = 60;
  spec.eviction.ttl_unit = EvictionSpec::TtlUnit::kSeconds;
  auto now = std::make_shared<std::atomic<int64_t>>(1000);
  TableOptions options;
  options.clock = [now] { return absl::FromUnixSeconds(now->load()); };
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec, options));
  std::vector<float> v(kDim);
  ASSERT_OK(table->Pull({1}, absl::MakeSpan(v)));
  now->store(1030);
  ASSERT_OK(table->Pull({2}, absl::MakeSpan(v)));
  now->store(1061);
  EXPECT_EQ(Value(table->SweepExpired()), 1u);
  now->store(1091);
  EXPECT_EQ(Value(table->SweepExpired()), 1u);
  EXPECT_EQ(table->Stats().rows, 0u);
}

// The cap keeps the most recently touched rows: 800 rows touched at step
// 1, 200 at step 40 and 100 at step 50, capped at 300, keep the 300 touched
// last (ages far enough apart for the cap's resolution, 1/8 of an age).
TEST_P(TableContractTest, MaxRowsEvictsTheLeastRecentlyTouchedRows) {
  TableSpec spec = SgdSpec("capped");
  spec.eviction.max_rows = 300;
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  std::vector<uint64_t> cold, hot;
  for (uint64_t k = 0; k < 1000; ++k) cold.push_back(1000000 + k * 31);
  for (uint64_t k = 0; k < 100; ++k) hot.push_back(5000000 + k * 17);
  std::vector<float> values(cold.size() * kDim);
  const absl::Span<const uint64_t> oldest =
      absl::MakeConstSpan(cold).first(800);
  const absl::Span<const uint64_t> newer =
      absl::MakeConstSpan(cold).subspan(800);
  ASSERT_OK(table->Pull(oldest, absl::MakeSpan(values).first(800 * kDim),
                        AccessContext{1}));
  ASSERT_OK(table->Pull(newer, absl::MakeSpan(values).first(200 * kDim),
                        AccessContext{40}));
  ASSERT_OK(table->Pull(hot, absl::MakeSpan(values).first(hot.size() * kDim),
                        AccessContext{50}));
  EXPECT_EQ(Value(table->SweepExpired()), 800u);
  const TableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, 300u);
  EXPECT_EQ(stats.evicted, 800u);
  std::unique_ptr<bool[]> found(new bool[hot.size()]);
  EXPECT_EQ(
      Value(table->Lookup(hot, absl::MakeSpan(values).first(hot.size() * kDim),
                          absl::MakeSpan(found.get(), hot.size()),
                          Table::MissingRows::kZeros)),
      hot.size());
  std::unique_ptr<bool[]> found_cold(new bool[cold.size()]);
  EXPECT_EQ(Value(table->Lookup(cold, absl::MakeSpan(values),
                                absl::MakeSpan(found_cold.get(), cold.size()),
                                Table::MissingRows::kZeros)),
            200u);
  for (size_t i = 800; i < cold.size(); ++i) EXPECT_TRUE(found_cold[i]) << i;
  // Under the cap a sweep removes nothing.
  EXPECT_EQ(Value(table->SweepExpired()), 0u);
  // Without a cap nothing is removed either.
  ASSERT_OK_AND_ASSIGN(auto uncapped, MakeTable(SgdSpec("uncapped")));
  ASSERT_OK(uncapped->Pull(cold, absl::MakeSpan(values)));
  EXPECT_EQ(Value(uncapped->SweepExpired()), 0u);
}

TEST_P(TableContractTest, TtlOffNeverEvicts) {
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(SgdSpec()));
  std::vector<float> v(kDim);
  ASSERT_OK(table->Pull({1}, absl::MakeSpan(v), AccessContext{1}));
  ASSERT_OK(table->Pull({2}, absl::MakeSpan(v), AccessContext{1u << 30}));
  EXPECT_EQ(Value(table->SweepExpired()), 0u);
}

// The sweep releases stripe locks every few thousand rows: Pulls of live
// rows run while it removes expired ones, and see correct values.
TEST_P(TableContractTest, SweepRunsAlongsidePulls) {
  TableSpec spec = SgdSpec();
  spec.num_stripes = 1;  // one stripe: the sweep and pulls contend
  spec.eviction.ttl = 5;
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  constexpr int kStale = 200000;
  std::vector<uint64_t> stale(kStale);
  for (int i = 0; i < kStale; ++i) stale[i] = 1000000 + i;
  std::vector<float> values(stale.size() * kDim);
  ASSERT_OK(table->Pull(stale, absl::MakeSpan(values), AccessContext{1}));
  const std::vector<uint64_t> live = {1, 2, 3};
  std::vector<float> live_values(live.size() * kDim);
  ASSERT_OK(table->Pull(live, absl::MakeSpan(live_values), AccessContext{100}));

  std::atomic<bool> sweeping{true};
  std::atomic<int> pulls_during_sweep{0};
  std::thread puller([&] {
    std::vector<float> out(live.size() * kDim);
    while (sweeping.load()) {
      ASSERT_OK(table->Pull(live, absl::MakeSpan(out), AccessContext{100}));
      ASSERT_EQ(out, live_values);
      pulls_during_sweep.fetch_add(1);
    }
  });
  EXPECT_EQ(Value(table->SweepExpired()), static_cast<uint64_t>(kStale));
  sweeping.store(false);
  puller.join();
  EXPECT_EQ(table->Stats().rows, live.size());
  std::printf("pulls completed during the sweep: %d\n",
              pulls_during_sweep.load());
}

TEST(MemoryTableTest, MemoryIsAccountedAndOverBudgetIsVisible) {
  TableSpec spec = SgdSpec();
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  spec.memory_budget_bytes = 4 << 20;
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
  EXPECT_FALSE(table->Stats().over_budget);
  std::vector<uint64_t> keys(100000);
  for (int i = 0; i < 100000; ++i) keys[i] = i;
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  const TableStats stats = table->Stats();
  EXPECT_EQ(stats.payload_bytes, 100000u * 2 * kDim * sizeof(float));
  // Header (16 B) and index come on top of the payload, nothing else big.
  EXPECT_GT(stats.resident_bytes, stats.payload_bytes + 100000u * 16);
  EXPECT_LT(stats.resident_bytes, stats.payload_bytes + 100000u * 48);
  EXPECT_TRUE(stats.over_budget);
  EXPECT_EQ(stats.memory_budget_bytes, 4u << 20);
}

TEST(MemoryTableTest, ExpectedRowsAreCommittedWhenTheTableIsCreated) {
  TableSpec spec = SgdSpec();
  spec.dim = 64;
  spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  spec.expected_rows = 200000;
  const uint64_t expected = ExpectedRowsBytes(spec);
  // 200k rows of (16 B header + 2 × 64 floats), plus the stripes' slack.
  EXPECT_GE(expected, 200000u * 528);
  EXPECT_LT(expected, 200000u * 528 * 11 / 10);
  const uint64_t before = ResidentBytes();
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
  EXPECT_GE(ResidentBytes() - before, expected * 9 / 10);
  // Rows handed out are what the stats count, not the committed memory.
  EXPECT_EQ(table->Stats().rows, 0u);
  EXPECT_LT(table->Stats().payload_bytes, 1u << 20);

  TableSpec budgeted = spec;
  budgeted.memory_budget_bytes = 10 << 20;
  EXPECT_EQ(ExpectedRowsBytes(budgeted), uint64_t{10} << 20);
  spec.expected_rows = 0;
  EXPECT_EQ(ExpectedRowsBytes(spec), 0u);
}

TEST(MemoryTableTest, ExpectedRowsBeyondWhatATableHoldsAreRefused) {
  TableSpec spec = SgdSpec();
  spec.num_stripes = 2;
  spec.expected_rows = (uint64_t{2} << 24) + 1;
  EXPECT_THAT(Table::Create(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("expected_rows")));
  spec.expected_rows = ~uint64_t{0};
  EXPECT_THAT(Table::Create(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("expected_rows")));
}

}  // namespace
}  // namespace embedps::embedding
