// Table::ReadRecords and Table::WriteRecords: the rows a worker's hot-row
// tier takes from a table and writes back, with their optimizer state.
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "common/status_matchers.h"
#include "embedding/optimizer.h"
#include "embedding/table.h"
#include "embedding/table_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TableSpec AdamSpec() {
  TableSpec spec = SgdSpec("hot");
  spec.optimizer.kind = OptimizerSpec::Kind::kAdam;
  spec.optimizer.learning_rate = 0.01f;
  // A snapshot holds every stripe's lock at once: few enough for TSAN's
  // deadlock detector (64 locks held at most).
  spec.num_stripes = 8;
  return spec;
}

struct Records {
  std::vector<char> bytes;
  std::unique_ptr<bool[]> found;
  uint64_t hits = 0;
};

Records Read(Table& table, const std::vector<uint64_t>& keys) {
  const TableSpec& spec = table.spec();
  Records r;
  r.bytes.resize(
      keys.size() *
      RowRecordBytes(spec.dim, OptimizerStateFloats(spec.optimizer, spec.dim)));
  r.found.reset(new bool[keys.size()]());
  absl::StatusOr<uint64_t> hits =
      table.ReadRecords(keys, absl::MakeSpan(r.bytes),
                        absl::MakeSpan(r.found.get(), keys.size()));
  EXPECT_OK(hits.status());
  r.hits = hits.ok() ? *hits : 0;
  return r;
}

// The floats of record `i` (embedding, then optimizer state).
std::vector<float> Floats(const Records& r, size_t i, size_t record_bytes) {
  std::vector<float> floats((record_bytes - 8) / sizeof(float));
  std::memcpy(floats.data(), r.bytes.data() + i * record_bytes + 8,
              record_bytes - 8);
  return floats;
}

class TableRecordsTest : public TableContractTest {};

INSTANTIATE_TEST_SUITE_P(MemoryAndSpill, TableRecordsTest,
                         ::testing::Values(false, true), TierName);

TEST_P(TableRecordsTest, ReadRecordsCopiesRowsWithStateAndChangesNothing) {
  const TableSpec spec = AdamSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<uint64_t> keys = {3, 17, 400, 9001};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values), AccessContext{2}));
  ASSERT_OK(table->Pull({17}, absl::MakeSpan(values).first(kDim)));
  std::vector<float> grads(keys.size() * kDim, 0.25f);
  ASSERT_OK(table->Push(keys, grads));
  table->EnableChangeLog();
  const size_t record_bytes = RowRecordBytes(kDim, 2 * kDim + 1);

  const Records r = Read(*table, {17, 5, 3});
  EXPECT_EQ(r.hits, 2u);
  EXPECT_TRUE(r.found[0]);
  EXPECT_FALSE(r.found[1]);
  EXPECT_TRUE(r.found[2]);
  ASSERT_OK(table->Scan([&](const RowView& row) {
    for (size_t i : {size_t{0}, size_t{2}}) {
      if (row.key != (i == 0 ? 17u : 3u)) continue;
      std::vector<float> expected(row.embedding.begin(), row.embedding.end());
      expected.insert(expected.end(), row.optimizer_state.begin(),
                      row.optimizer_state.end());
      EXPECT_EQ(Floats(r, i, record_bytes), expected) << row.key;
      uint32_t meta[2];
      std::memcpy(meta, r.bytes.data() + i * record_bytes, sizeof(meta));
      EXPECT_EQ(meta[1], row.access_count) << "no flags in the count";
    }
  }));
  EXPECT_EQ(Floats(r, 1, record_bytes),
            std::vector<float>((record_bytes - 8) / 4, 0.0f));
  EXPECT_TRUE(table->TakeChangedKeys().empty());
  EXPECT_EQ(table->Stats().rows, keys.size()) << "no row for key 5";
}

TEST_P(TableRecordsTest, WrittenRecordsAreTheRowsAndTheirOptimizerGoesOn) {
  const TableSpec spec = AdamSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 300; ++k) keys.push_back(k * 7 + 1);
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  std::vector<float> grads(keys.size() * kDim, 0.5f);
  ASSERT_OK(table->Push(keys, grads));
  ASSERT_OK(table->TakeSnapshot(/*incremental=*/false).status());
  table->EnableChangeLog();

  // A worker's tier: read, a few updates of its own, write back.
  const size_t record_bytes = RowRecordBytes(kDim, 2 * kDim + 1);
  Records r = Read(*table, keys);
  ASSERT_EQ(r.hits, keys.size());
  const std::unique_ptr<RowOptimizer> optimizer =
      RowOptimizer::Create(spec.optimizer, kDim);
  std::vector<float> grad(kDim, -0.125f);
  for (size_t i = 0; i < keys.size(); ++i) {
    float* floats =
        reinterpret_cast<float*>(r.bytes.data() + i * record_bytes + 8);
    optimizer->Apply(floats, floats + kDim, grad.data());
  }
  // Key 8 was erased meanwhile, key 4 never existed: neither is written.
  ASSERT_OK(table->Erase({8}).status());
  std::vector<uint64_t> write_keys = keys;
  write_keys.push_back(4);
  std::vector<char> write_records = r.bytes;
  write_records.resize(write_records.size() + record_bytes, 0);
  std::unique_ptr<bool[]> written(new bool[write_keys.size()]());
  ASSERT_OK_AND_ASSIGN(
      const uint64_t count,
      table->WriteRecords(write_keys, write_records,
                          absl::MakeSpan(written.get(), write_keys.size())));
  EXPECT_EQ(count, keys.size() - 1);
  EXPECT_FALSE(written[1]) << "key 8";
  EXPECT_FALSE(written[keys.size()]) << "key 4";
  EXPECT_TRUE(written[0]);
  std::vector<float> found_values(kDim);
  bool found = true;
  ASSERT_OK(table->Lookup({8}, absl::MakeSpan(found_values),
                          absl::MakeSpan(&found, 1),
                          Table::MissingRows::kZeros));
  EXPECT_FALSE(found) << "an erased row is not brought back";
  ASSERT_OK(table->Lookup({4}, absl::MakeSpan(found_values),
                          absl::MakeSpan(&found, 1),
                          Table::MissingRows::kZeros));
  EXPECT_FALSE(found) << "a write never creates a row";

  // The records' counts (the tier's uses) add to the rows' own.
  {
    const Records counted = Read(*table, {1});
    uint32_t before;
    std::memcpy(&before, counted.bytes.data() + 4, sizeof(before));
    std::vector<char> one = counted.bytes;
    const uint32_t uses = 5;
    std::memcpy(one.data() + 4, &uses, sizeof(uses));
    bool flag = false;
    ASSERT_OK(table->WriteRecords({1}, one, absl::MakeSpan(&flag, 1)));
    uint32_t after;
    std::memcpy(&after, Read(*table, {1}).bytes.data() + 4, sizeof(after));
    EXPECT_EQ(after, before + 5);
  }

  // Every written row changed: logged, and in the next incremental snapshot.
  std::vector<uint64_t> changed = table->TakeChangedKeys();
  EXPECT_EQ(changed.size(), keys.size());  // 299 written + 1 erased
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(true));
  EXPECT_TRUE(snapshot->incremental());
  size_t rows_in_snapshot = 0;
  ASSERT_OK(snapshot->ForEach([&](uint64_t, const char* record) {
    if (record != nullptr) ++rows_in_snapshot;
    return absl::OkStatus();
  }));
  EXPECT_EQ(rows_in_snapshot, keys.size() - 1);

  // The table's own optimizer goes on from the written state: one more Push
  // equals one more update of the tier's copy.
  ASSERT_OK(table->Push(keys, grads));
  const Records after = Read(*table, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == 8) continue;
    float* floats =
        reinterpret_cast<float*>(r.bytes.data() + i * record_bytes + 8);
    optimizer->Apply(floats, floats + kDim, grads.data());
    EXPECT_EQ(Floats(after, i, record_bytes), Floats(r, i, record_bytes))
        << keys[i];
  }
}

TEST_P(TableRecordsTest, BadWritesAreRefusedWhole) {
  const TableSpec spec = AdamSpec();
  ASSERT_OK_AND_ASSIGN(auto table, MakeTable(spec));
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> values(keys.size() * kDim);
  ASSERT_OK(table->Pull(keys, absl::MakeSpan(values)));
  const size_t record_bytes = RowRecordBytes(kDim, 2 * kDim + 1);
  Records r = Read(*table, keys);
  std::vector<char> changed = r.bytes;
  for (size_t i = 8; i < changed.size(); i += record_bytes) {
    float one = 1.0f;
    std::memcpy(changed.data() + i, &one, sizeof(one));
  }
  bool written[3] = {};
  // Sizes.
  EXPECT_THAT(table->WriteRecords(keys, absl::MakeConstSpan(changed).first(10),
                                  absl::MakeSpan(written)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes")));
  EXPECT_THAT(table->WriteRecords(keys, changed, absl::MakeSpan(written, 2)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A repeated key.
  EXPECT_THAT(
      table->WriteRecords({1, 2, 1}, changed, absl::MakeSpan(written)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 1 repeats")));
  // A NaN in the last record's optimizer state: not even the first is
  // written.
  std::vector<char> nan_records = changed;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_records.data() + 3 * record_bytes - sizeof(float), &nan,
              sizeof(nan));
  EXPECT_THAT(table->WriteRecords(keys, nan_records, absl::MakeSpan(written)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 3")));
  const Records after = Read(*table, keys);
  EXPECT_EQ(after.bytes, r.bytes) << "nothing changed";
  bool short_found[2];
  std::vector<char> short_records(record_bytes);
  EXPECT_THAT(table->ReadRecords(keys, absl::MakeSpan(short_records),
                                 absl::MakeSpan(short_found)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace embedps::embedding
