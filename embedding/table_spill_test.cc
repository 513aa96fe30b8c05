// The spill tier beyond the shared contract (table_test): rows that spill
// and come back continue exactly as rows that never left memory, and every
// request reads the tier with at most one batched MultiGet. Rows that leave
// memory unchanged are not written again: their access metadata is exact in
// a table with a TTL, and lags (never leads) in one without.
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "embedding/table.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

constexpr int kDim = 8;

struct SavedRow {
  std::vector<float> embedding;
  std::vector<float> state;
  uint32_t access_count;
  uint32_t last_touch;
  bool operator==(const SavedRow& other) const {
    return SameFloats(other) && access_count == other.access_count &&
           last_touch == other.last_touch;
  }
  // Bitwise, so that -0.0 vs 0.0 or NaN payloads would differ.
  bool SameFloats(const SavedRow& other) const {
    return SameBits(embedding, other.embedding) && SameBits(state, other.state);
  }
  // The same floats, and access metadata that is `truth`'s or older.
  bool LagsBehind(const SavedRow& truth) const {
    return SameFloats(truth) && access_count <= truth.access_count &&
           last_touch <= truth.last_touch;
  }
  static bool SameBits(const std::vector<float>& a,
                       const std::vector<float>& b) {
    return a.size() == b.size() &&
           (a.empty() ||
            std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
};

std::map<uint64_t, SavedRow> AllRows(const Table& table) {
  std::map<uint64_t, SavedRow> rows;
  EXPECT_OK(table.Scan([&](const RowView& row) {
    EXPECT_EQ(rows.count(row.key), 0u) << "row seen twice: " << row.key;
    rows[row.key] =
        SavedRow{{row.embedding.begin(), row.embedding.end()},
                 {row.optimizer_state.begin(), row.optimizer_state.end()},
                 row.access_count,
                 row.last_touch};
  }));
  return rows;
}

TableSpec SpecWith(OptimizerSpec::Kind kind) {
  TableSpec spec;
  spec.name = absl::StrCat("opt", static_cast<int>(kind));
  spec.dim = kDim;
  spec.seed = 17;
  spec.num_stripes = 4;
  spec.optimizer.kind = kind;
  spec.optimizer.learning_rate = 0.05f;
  spec.optimizer.ftrl_l1 = 0.001f;
  spec.optimizer.ftrl_l2 = 0.01f;
  return spec;
}

size_t SgdRecordBytes() {
  return RowRecordBytes(
      kDim, OptimizerStateFloats(SpecWith(OptimizerSpec::Kind::kSgd).optimizer,
                                 kDim));
}

// (optimizer, whether the table has a TTL: then access metadata is exact).
class SpillTrajectoryTest
    : public ::testing::TestWithParam<std::tuple<OptimizerSpec::Kind, bool>> {};

TEST_P(SpillTrajectoryTest, SpilledRowsContinueBitForBit) {
  TableSpec spec = SpecWith(std::get<0>(GetParam()));
  const bool with_ttl = std::get<1>(GetParam());
  if (with_ttl) spec.eviction.ttl = 1000;  // nothing expires in 150 steps
  ASSERT_OK_AND_ASSIGN(auto in_memory, Table::Create(spec));
  TableSpec budgeted = spec;
  // Room for about 40 of the 2000 rows per stripe.
  budgeted.memory_budget_bytes =
      4 * 40 *
      (16 + RowRecordBytes(kDim, OptimizerStateFloats(spec.optimizer, kDim)) +
       12);
  TableOptions options;
  options.spill_directory =
      absl::StrCat(::testing::TempDir(), "/trajectory_", spec.name);
  ASSERT_OK_AND_ASSIGN(auto spilling, Table::Create(budgeted, options));

  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> key_of(0, 1999);
  std::normal_distribution<float> grad_of(0.0f, 1.0f);
  constexpr int kRounds = 150;
  constexpr int kBatch = 300;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<uint64_t> keys(kBatch);
    for (uint64_t& key : keys) key = key_of(rng) * 0x9E3779B97F4A7C15ull;
    std::vector<float> grads(kBatch * kDim);
    for (float& g : grads) g = grad_of(rng);
    const AccessContext context{static_cast<uint64_t>(round)};
    std::vector<float> want(kBatch * kDim), got(kBatch * kDim);
    ASSERT_OK(in_memory->Pull(keys, absl::MakeSpan(want), context));
    ASSERT_OK(spilling->Pull(keys, absl::MakeSpan(got), context));
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(want[i], got[i])
          << "round " << round << " position " << i / kDim << " key "
          << keys[i / kDim] << " first seen at "
          << (std::find(keys.begin(), keys.end(), keys[i / kDim]) -
              keys.begin());
    }
    ASSERT_OK(in_memory->Push(keys, grads, context));
    ASSERT_OK(spilling->Push(keys, grads, context));
  }
  const TableStats stats = spilling->Stats();
  EXPECT_GT(stats.spills, 10000u);
  EXPECT_GT(stats.promotions, 10000u);
  // Rows promoted by a Pull and evicted again before their Push.
  EXPECT_GT(stats.spills_of_unchanged_rows, 1000u);
  EXPECT_LT(stats.spills_of_unchanged_rows, stats.spills);
  EXPECT_GT(stats.spilled_rows, stats.resident_rows);
  EXPECT_EQ(stats.rows, in_memory->Stats().rows);
  // Batched: never more than one MultiGet per request (one thread here, so
  // the re-read under a lock never triggers).
  EXPECT_LE(stats.spill_multigets, 2u * kRounds);
  EXPECT_GT(stats.spill_multiget_keys, stats.spill_multigets * 50);
  std::printf("spills %lu promotions %lu multigets %lu keys %lu\n",
              static_cast<unsigned long>(stats.spills),
              static_cast<unsigned long>(stats.promotions),
              static_cast<unsigned long>(stats.spill_multigets),
              static_cast<unsigned long>(stats.spill_multiget_keys));

  const auto want_rows = AllRows(*in_memory);
  const auto got_rows = AllRows(*spilling);
  ASSERT_EQ(want_rows.size(), got_rows.size());
  int differing = 0;
  int lagging = 0;
  for (const auto& [key, row] : want_rows) {
    auto it = got_rows.find(key);
    ASSERT_NE(it, got_rows.end()) << key;
    if (with_ttl) {
      differing += !(it->second == row);
    } else {
      differing += !it->second.LagsBehind(row);
      lagging += !(it->second == row);
    }
  }
  EXPECT_EQ(differing, 0);
  // Without a TTL the Pulls of rows evicted unchanged are not written back:
  // their metadata lags while their floats stay exact.
  if (!with_ttl) {
    EXPECT_GT(lagging, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    EveryOptimizer, SpillTrajectoryTest,
    ::testing::Combine(::testing::Values(OptimizerSpec::Kind::kSgd,
                                         OptimizerSpec::Kind::kAdagrad,
                                         OptimizerSpec::Kind::kRowWiseAdagrad,
                                         OptimizerSpec::Kind::kAdam,
                                         OptimizerSpec::Kind::kFtrl),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<OptimizerSpec::Kind, bool>>&
           info) {
      return absl::StrCat(OptimizerKindName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_ttl" : "");
    });

// A trained table's rows as a checkpoint holds them: key -> record.
void SnapshotRecords(Table& table, std::vector<uint64_t>& keys,
                     std::vector<char>& records) {
  ASSERT_OK_AND_ASSIGN(auto snapshot, table.TakeSnapshot(false));
  ASSERT_OK(snapshot->ForEach([&](uint64_t key, const char* record) {
    keys.push_back(key);
    records.insert(records.end(), record, record + snapshot->record_bytes());
    return absl::OkStatus();
  }));
}

TEST(SpillTest, BulkRestoreOfNewRowsEqualsRestoringThemInSmallBatches) {
  // Enough rows for RestoreRows to ingest an SST file into the spill tier
  // (from 4096 rows on), shuffled and with in-memory flags set, which the
  // bulk path must sort and clear.
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kAdagrad);
  // With a TTL (that nothing reaches) access metadata is exact, so whole
  // rows can be compared.
  spec.eviction.ttl = 1000;
  ASSERT_OK_AND_ASSIGN(auto source, Table::Create(spec));
  std::vector<uint64_t> all_keys(6000);
  for (size_t i = 0; i < all_keys.size(); ++i) all_keys[i] = i * 7919 + 3;
  std::vector<float> values(all_keys.size() * kDim);
  ASSERT_OK(source->Pull(all_keys, absl::MakeSpan(values), {1}));
  ASSERT_OK(
      source->Push(all_keys, std::vector<float>(values.size(), 0.5f), {2}));
  std::vector<uint64_t> keys;
  std::vector<char> records;
  SnapshotRecords(*source, keys, records);
  ASSERT_EQ(keys.size(), all_keys.size());
  const size_t record_bytes = records.size() / keys.size();
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(5));
  std::vector<uint64_t> shuffled_keys;
  std::vector<char> shuffled_records;
  for (size_t i : order) {
    shuffled_keys.push_back(keys[i]);
    shuffled_records.insert(shuffled_records.end(),
                            records.begin() + i * record_bytes,
                            records.begin() + (i + 1) * record_bytes);
    // The access word's flag bits (dirty, referenced).
    shuffled_records[shuffled_records.size() - record_bytes + 7] |= 0xC0;
  }

  spec.memory_budget_bytes = 4 * 100 * record_bytes;  // < 100 rows a stripe
  const auto make = [&](const std::string& name) {
    TableOptions options;
    options.spill_directory =
        absl::StrCat(::testing::TempDir(), "/bulk_", name);
    auto table = Table::Create(spec, options);
    EXPECT_OK(table.status());
    return std::move(table).value();
  };
  auto bulk = make("ingested");
  ASSERT_OK(bulk->RestoreRows(shuffled_keys, shuffled_records,
                              Table::RestoredKeys::kNew));
  auto batched = make("batched");
  for (size_t begin = 0; begin < keys.size(); begin += 100) {
    const size_t n = std::min<size_t>(100, keys.size() - begin);
    ASSERT_OK(batched->RestoreRows(absl::MakeConstSpan(keys).subspan(begin, n),
                                   absl::MakeConstSpan(records).subspan(
                                       begin * record_bytes, n * record_bytes),
                                   Table::RestoredKeys::kNew));
  }
  const TableStats stats = bulk->Stats();
  EXPECT_EQ(stats.rows, keys.size());
  EXPECT_GT(stats.resident_rows, 0u);
  EXPECT_EQ(stats.resident_rows + stats.spilled_rows, keys.size());
  EXPECT_EQ(stats.resident_rows, batched->Stats().resident_rows)
      << "each stripe fills to its share either way";
  EXPECT_EQ(AllRows(*bulk), AllRows(*source));
  EXPECT_EQ(AllRows(*batched), AllRows(*source));
  // Both go on alike: promotions read the ingested rows.
  for (uint64_t step = 3; step < 6; ++step) {
    std::vector<float> from_bulk(values.size()), from_batched(values.size());
    ASSERT_OK(bulk->Pull(all_keys, absl::MakeSpan(from_bulk), {step}));
    ASSERT_OK(batched->Pull(all_keys, absl::MakeSpan(from_batched), {step}));
    EXPECT_TRUE(SavedRow::SameBits(from_bulk, from_batched));
    ASSERT_OK(bulk->Push(all_keys, from_bulk, {step}));
    ASSERT_OK(batched->Push(all_keys, from_batched, {step}));
  }
  EXPECT_EQ(AllRows(*bulk), AllRows(*batched));
}

// An SGD table that spills beyond a budget of ~10 rows per stripe.
absl::StatusOr<std::unique_ptr<Table>> SmallSpillingTable(
    const std::string& name) {
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kSgd);
  spec.memory_budget_bytes = spec.num_stripes * 10 * SgdRecordBytes();
  TableOptions options;
  options.spill_directory = absl::StrCat(::testing::TempDir(), "/", name);
  return Table::Create(spec, options);
}

// The rows a snapshot holds, by key (records compared as bytes).
std::map<uint64_t, std::string> SnapshotRows(const TableSnapshot& snapshot) {
  std::map<uint64_t, std::string> rows;
  EXPECT_OK(snapshot.ForEach([&](uint64_t key, const char* record) {
    rows[key] = record == nullptr
                    ? std::string("removed")
                    : std::string(record, snapshot.record_bytes());
    return absl::OkStatus();
  }));
  return rows;
}

TEST(SpillTest, TooManyChangedSpilledRowsMakeTheNextSnapshotFull) {
  // A stripe tracks the keys of its changed spilled rows for the next
  // incremental snapshot only up to its share of the budget (at least
  // kMinTrackedKeysPerStripe = 1024): past it the keys are dropped and
  // the snapshot is full, so that memory stays bounded however much
  // changes between checkpoints.
  ASSERT_OK_AND_ASSIGN(auto table, SmallSpillingTable("overflow"));
  const int stripes = table->spec().num_stripes;
  std::vector<uint64_t> keys(stripes * 3000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1 + i;
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  ASSERT_OK_AND_ASSIGN(auto first, table->TakeSnapshot(true));
  EXPECT_FALSE(first->incremental()) << "the first snapshot is full";

  // A few changes: an incremental snapshot of just those.
  const std::vector<uint64_t> few(keys.begin(), keys.begin() + 50);
  ASSERT_OK(table->Push(few, std::vector<float>(few.size() * kDim, 0.5f)));
  ASSERT_OK_AND_ASSIGN(auto small, table->TakeSnapshot(true));
  EXPECT_TRUE(small->incremental());
  EXPECT_EQ(SnapshotRows(*small).size(), few.size());

  // Every key changed (~3000 a stripe, nearly all spilled): full.
  ASSERT_OK(table->Push(keys, std::vector<float>(keys.size() * kDim, 0.25f)));
  ASSERT_GT(table->Stats().spilled_rows, keys.size() * 9 / 10);
  ASSERT_OK_AND_ASSIGN(auto large, table->TakeSnapshot(true));
  EXPECT_FALSE(large->incremental());
  const std::map<uint64_t, std::string> rows = SnapshotRows(*large);
  ASSERT_EQ(rows.size(), keys.size());
  ASSERT_OK_AND_ASSIGN(auto full, table->TakeSnapshot(false));
  EXPECT_EQ(rows, SnapshotRows(*full)) << "the same rows as a full snapshot";

  // Tracking resumes after it.
  ASSERT_OK(table->Push(few, std::vector<float>(few.size() * kDim, 0.5f)));
  ASSERT_OK_AND_ASSIGN(auto again, table->TakeSnapshot(true));
  EXPECT_TRUE(again->incremental());
  EXPECT_EQ(SnapshotRows(*again).size(), few.size());
}

TEST(SpillTest, TtlSeesTouchesOfRowsThatLeftMemoryUnchanged) {
  // A row read back from the spill tier and evicted again without a change
  // is not rewritten; its new last touch must still reach the spill tier,
  // and a TTL sweep must not delete the copy while the row is resident.
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kSgd);
  spec.eviction.ttl = 10;
  spec.eviction.ttl_unit = EvictionSpec::TtlUnit::kSteps;
  ASSERT_OK_AND_ASSIGN(auto in_memory, Table::Create(spec));
  TableSpec budgeted = spec;
  // About 2 rows per stripe.
  budgeted.memory_budget_bytes =
      spec.num_stripes * 2 * (16 + SgdRecordBytes() + 12);
  TableOptions options;
  options.spill_directory = absl::StrCat(::testing::TempDir(), "/ttl_touch");
  ASSERT_OK_AND_ASSIGN(auto spilling, Table::Create(budgeted, options));
  const std::vector<uint64_t> kept = {424242};
  const auto others = [](uint64_t first) {
    std::vector<uint64_t> keys(100);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = first + i;
    return keys;
  };
  for (Table* table : {in_memory.get(), spilling.get()}) {
    std::vector<float> row(kDim);
    ASSERT_OK(table->Pull(kept, absl::MakeSpan(row), {1}));
    ASSERT_OK(table->Push(kept, std::vector<float>(kDim, 0.25f), {1}));
    std::vector<float> other_rows(100 * kDim);
    // Push `kept` out of memory, then read it back at step 20.
    ASSERT_OK(table->Pull(others(1000), absl::MakeSpan(other_rows), {2}));
    ASSERT_OK(table->Pull(kept, absl::MakeSpan(row), {20}));
    // The spill tier's copy says step 1: expired, but the row is resident.
    ASSERT_OK_AND_ASSIGN(uint64_t swept, table->SweepExpired());
    EXPECT_EQ(swept, 100u) << "the others (step 2)";
    // Out of memory again, unchanged, then swept at step 25.
    // (Twice: CLOCK spares a row touched since its hand last passed.)
    ASSERT_OK(table->Pull(others(2000), absl::MakeSpan(other_rows), {25}));
    ASSERT_OK(table->Pull(others(3000), absl::MakeSpan(other_rows), {25}));
    ASSERT_OK_AND_ASSIGN(swept, table->SweepExpired());
    EXPECT_EQ(swept, 0u) << "touched at 20 and 25";
  }
  EXPECT_GT(spilling->Stats().spills_of_unchanged_rows, 0u);
  EXPECT_EQ(AllRows(*spilling), AllRows(*in_memory));
  std::vector<float> want(kDim), got(kDim);
  ASSERT_OK(in_memory->Pull(kept, absl::MakeSpan(want), {26}));
  ASSERT_OK(spilling->Pull(kept, absl::MakeSpan(got), {26}));
  EXPECT_TRUE(SavedRow::SameBits(want, got));
}

TEST(SpillTest, OneOffKeysDoNotPushOutFrequentlyPulledRows) {
  // A scan of keys seen once each, many times the budget, between Pulls of
  // a hot set that fits: the hot rows stay in memory (the rows that came
  // in lose each eviction round to rows seen more often). A CLOCK alone
  // evicts all 200 hot rows here (checked by disabling KeepFrequentRows).
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kSgd);
  // ~150 rows a stripe: a small budget keeps 11/16 for its rows.
  spec.memory_budget_bytes =
      spec.num_stripes * 150 * (SgdRecordBytes() + 40) * 16 / 11;
  TableOptions options;
  options.spill_directory = absl::StrCat(::testing::TempDir(), "/scan");
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec, options));
  std::vector<uint64_t> hot(200);
  for (size_t i = 0; i < hot.size(); ++i) hot[i] = 0x9E3779B97F4A7C15ull * i;
  std::vector<float> values(hot.size() * kDim);
  for (int round = 0; round < 10; ++round) {
    ASSERT_OK(table->Pull(hot, absl::MakeSpan(values)));
  }
  const uint64_t capacity = table->Stats().resident_rows;
  ASSERT_EQ(capacity, hot.size()) << "the hot set fits";
  std::vector<uint64_t> scan(100);
  std::vector<float> scanned(scan.size() * kDim);
  for (int batch = 0; batch < 60; ++batch) {
    for (size_t i = 0; i < scan.size(); ++i) scan[i] = 1 + batch * 1000 + i;
    ASSERT_OK(table->Pull(scan, absl::MakeSpan(scanned)));
  }
  const TableStats before = table->Stats();
  ASSERT_GT(before.spills, 4000u) << "the scan went through memory";
  EXPECT_GT(before.spills_of_newcomers, 4000u);
  ASSERT_OK(table->Pull(hot, absl::MakeSpan(values)));
  const TableStats after = table->Stats();
  // At most a tenth: the frequency sketch over-counts some scanned keys
  // (6000 distinct keys through 256 counters a row per stripe).
  EXPECT_LE(after.spill_multiget_keys - before.spill_multiget_keys, 20u)
      << "hot rows that left memory during the scan";
}

TEST(SpillTest, ResidentBytesStayWithinTheBudgetUnderChurn) {
  // Everything a stripe holds counts: rows handed out, index, free list,
  // spill-copy metadata, both sketches, the newcomers of the next round.
  // A batch brings its misses in before the stripe evicts, so memory may
  // pass the budget by one batch's rows (the arena keeps their places for
  // the next batch); beyond that it must not grow.
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kAdagrad);
  spec.memory_budget_bytes = 256 << 10;
  TableOptions options;
  options.spill_directory = absl::StrCat(::testing::TempDir(), "/churn");
  ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec, options));
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint64_t> key_of(0, 49999);
  std::vector<uint64_t> keys(200);
  std::vector<float> values(keys.size() * kDim);
  // Row bytes (header, embedding, Adagrad state) and their index slot.
  const uint64_t one_batch =
      keys.size() * (16 + RowRecordBytes(kDim, kDim) + 16);
  for (int batch = 0; batch < 300; ++batch) {
    for (uint64_t& key : keys) key = key_of(rng);
    ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
    ASSERT_OK(table->Push(keys, values));
    const TableStats stats = table->Stats();
    ASSERT_LE(stats.resident_bytes, stats.memory_budget_bytes + one_batch)
        << "batch " << batch << ", " << stats.resident_rows << " rows";
  }
  const TableStats stats = table->Stats();
  EXPECT_GT(stats.spilled_rows, 10000u);
  // The rows' share: the rest is the spill tier's (memtables, cache) and
  // the tracked changes' (spill_policy.h).
  EXPECT_GT(stats.resident_bytes, stats.memory_budget_bytes / 2)
      << "the budget is used";
  EXPECT_GT(stats.spill_memory_bytes, 0u) << "RocksDB's memory is reported";
  // A budget this small is below RocksDB's floors (4 x 64 KiB memtables,
  // 64 KiB cache: docs/architecture.md), which come on top.
  EXPECT_LE(stats.spill_memory_bytes,
            stats.memory_budget_bytes + (uint64_t{512} << 10));
}

TEST(SpillTest, BulkRestoreRefusesRepeatedKeysAndChangesNothing) {
  const size_t record_bytes = SgdRecordBytes();
  ASSERT_OK_AND_ASSIGN(auto table, SmallSpillingTable("repeated"));
  std::vector<uint64_t> keys(5000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 5000 - i;
  keys[10] = keys[20];
  EXPECT_THAT(
      table->RestoreRows(keys, std::vector<char>(keys.size() * record_bytes),
                         Table::RestoredKeys::kNew),
      ::embedps::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                   ::testing::HasSubstr("repeated")));
  EXPECT_EQ(table->Stats().rows, 0u);
}

TEST(SpillTest, AdoptingAFileNeedsASpillTierAndConsistentShapes) {
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kSgd);
  ASSERT_OK_AND_ASSIGN(auto memory_only, Table::Create(spec));
  const std::vector<uint64_t> counts(spec.num_stripes, 0);
  EXPECT_THAT(
      memory_only->AdoptSpillFile("/nowhere/t.sst", {}, {}, counts),
      ::embedps::testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                   ::testing::HasSubstr("no spill tier")));
  const size_t record_bytes = SgdRecordBytes();
  ASSERT_OK_AND_ASSIGN(auto spilling, SmallSpillingTable("adopt_bad"));
  // Records of more keys than named; row counts of another stripe count.
  EXPECT_THAT(
      spilling->AdoptSpillFile("/nowhere/t.sst", {7},
                               std::vector<char>(2 * record_bytes), counts),
      ::embedps::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                   ::testing::HasSubstr("bytes of records")));
  EXPECT_THAT(spilling->AdoptSpillFile("/nowhere/t.sst", {}, {},
                                       std::vector<uint64_t>(3, 0)),
              ::embedps::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           ::testing::HasSubstr("stripes")));
  // A file that is not there.
  EXPECT_THAT(
      spilling->AdoptSpillFile("/nowhere/t.sst", {}, {}, counts),
      ::embedps::testing::StatusIs(absl::StatusCode::kUnavailable,
                                   ::testing::HasSubstr("/nowhere/t.sst")));
  EXPECT_EQ(spilling->Stats().rows, 0u);
}

TEST(SpillTest, ASpillDirectoryThatCannotBeCreatedIsAClearError) {
  TableSpec spec = SpecWith(OptimizerSpec::Kind::kSgd);
  spec.memory_budget_bytes = 1 << 20;
  TableOptions options;
  options.spill_directory = "/proc/embedps_cannot_be_here/spill";
  EXPECT_THAT(Table::Create(spec, options).status(),
              ::embedps::testing::StatusIs(
                  absl::StatusCode::kFailedPrecondition,
                  ::testing::HasSubstr("/proc/embedps_cannot_be_here/spill")));
}

}  // namespace
}  // namespace embedps::embedding
