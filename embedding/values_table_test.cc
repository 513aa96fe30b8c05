#include "embedding/values_table.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "absl/types/span.h"
#include "common/status_matchers.h"
#include "embedding/table_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TableSpec ValuesSpec(int32_t stripes = 4) {
  TableSpec spec = SgdSpec("values");
  spec.num_stripes = stripes;
  return spec;
}

// Records (8 bytes of metadata, then the floats) of `rows` (keys × dim).
std::vector<char> Records(absl::Span<const float> rows, size_t keys) {
  const size_t record = RowRecordBytes(kDim, 0);
  std::vector<char> out(keys * record, 0x5a);
  for (size_t i = 0; i < keys; ++i) {
    std::memcpy(out.data() + i * record + 8, rows.data() + i * kDim,
                kDim * sizeof(float));
  }
  return out;
}

absl::Status Restore(Table& table, absl::Span<const uint64_t> keys,
                     absl::Span<const float> rows) {
  const std::vector<char> records = Records(rows, keys.size());
  return table.RestoreRows(keys, records);
}

// The table's rows, read by Scan.
std::map<uint64_t, std::vector<float>> Rows(const Table& table) {
  std::map<uint64_t, std::vector<float>> rows;
  EXPECT_OK(table.Scan([&](const RowView& row) {
    EXPECT_TRUE(rows.emplace(row.key, std::vector<float>(row.embedding.begin(),
                                                         row.embedding.end()))
                    .second)
        << "key " << row.key << " seen twice";
  }));
  return rows;
}

// A random sequence of restores (new and existing keys), erasures (held
// and absent keys) and rebuilds leaves the table equal to a map, by Lookup
// (hits, misses with zeros and with initial values), Scan and Stats.
TEST(ValuesTableTest, AgreesWithAMapThroughRestoresErasesAndRebuilds) {
  const TableSpec spec = ValuesSpec();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Table> table, CreateValuesTable(spec));
  std::map<uint64_t, std::vector<float>> model;
  std::mt19937_64 random(7);
  // Keys from a range small enough to repeat, wide enough to rebuild
  // stripes many times.
  std::uniform_int_distribution<uint64_t> key_of(0, 30000);
  uint64_t erased = 0;
  for (int round = 0; round < 60; ++round) {
    const int op = static_cast<int>(random() % 5);
    if (op <= 2) {
      // Distinct keys a batch, as a checkpoint file's.
      std::map<uint64_t, std::vector<float>> batch;
      const size_t n = 1 + random() % 3000;
      for (size_t i = 0; i < n; ++i) {
        std::vector<float> row(kDim);
        for (float& v : row) v = static_cast<float>(random() % 1000) * 0.5f;
        batch[key_of(random)] = row;
      }
      std::vector<uint64_t> keys;
      std::vector<float> rows;
      for (const auto& [key, row] : batch) {
        keys.push_back(key);
        rows.insert(rows.end(), row.begin(), row.end());
        model[key] = row;
      }
      ASSERT_OK(Restore(*table, keys, rows));
    } else if (op == 3) {
      std::vector<uint64_t> keys;
      const size_t n = 1 + random() % 2000;
      uint64_t expected = 0;
      for (size_t i = 0; i < n; ++i) {
        const uint64_t key = key_of(random);
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
        keys.push_back(key);
        expected += model.erase(key);
      }
      ASSERT_OK_AND_ASSIGN(const uint64_t removed, table->Erase(keys));
      EXPECT_EQ(removed, expected) << "round " << round;
      erased += removed;
    } else {
      table->ReleaseUnusedMemory();
    }
    // Every key of the range, and a few beyond it.
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k <= 30000; k += 1 + random() % 7) keys.push_back(k);
    keys.push_back(~uint64_t{0});
    std::vector<float> values(keys.size() * kDim);
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    const auto missing = round % 2 == 0 ? Table::MissingRows::kZeros
                                        : Table::MissingRows::kInitialValues;
    ASSERT_OK_AND_ASSIGN(
        const uint64_t hits,
        table->Lookup(keys, absl::MakeSpan(values),
                      absl::MakeSpan(found.get(), keys.size()), missing));
    uint64_t expected_hits = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::vector<float> got(values.begin() + i * kDim,
                                   values.begin() + (i + 1) * kDim);
      auto it = model.find(keys[i]);
      if (it != model.end()) {
        ++expected_hits;
        ASSERT_TRUE(found[i]) << "key " << keys[i] << ", round " << round;
        ASSERT_EQ(got, it->second) << "key " << keys[i];
      } else {
        ASSERT_FALSE(found[i]) << "key " << keys[i] << ", round " << round;
        ASSERT_EQ(got, missing == Table::MissingRows::kZeros
                           ? std::vector<float>(kDim, 0.0f)
                           : InitialOf(spec, keys[i]));
      }
    }
    EXPECT_EQ(hits, expected_hits);
    ASSERT_EQ(Rows(*table), model) << "round " << round;
    const TableStats stats = table->Stats();
    EXPECT_EQ(stats.rows, model.size());
    EXPECT_EQ(stats.erased, erased);
    EXPECT_EQ(stats.payload_bytes, model.size() * kDim * sizeof(float));
  }
}

// Settled, a row costs its floats, its key and at most a byte of
// directory: nothing else.
TEST(ValuesTableTest, ARowCostsItsFloatsAndItsKey) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Table> table,
                       CreateValuesTable(ValuesSpec(64)));
  constexpr size_t kRows = 200000;
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  for (size_t done = 0; done < kRows; done += keys.size()) {
    keys.clear();
    rows.clear();
    for (size_t i = done; i < std::min(kRows, done + 10000); ++i) {
      keys.push_back(i * 7919);
      rows.insert(rows.end(), kDim, static_cast<float>(i));
    }
    ASSERT_OK(Restore(*table, keys, rows));
  }
  table->ReleaseUnusedMemory();
  const TableStats stats = table->Stats();
  EXPECT_EQ(stats.rows, kRows);
  const size_t row_bytes = kDim * sizeof(float) + sizeof(uint64_t) + 1;
  EXPECT_LE(stats.resident_bytes, kRows * row_bytes + 64 * 1024)
      << static_cast<double>(stats.resident_bytes) / kRows << " bytes a row";
}

// Lookups running while rows are rewritten and keys erased and restored
// see every row whole: the old one, the new one, or no row.
TEST(ValuesTableTest, LookupsSeeWholeRowsWhileWritten) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Table> table,
                       CreateValuesTable(ValuesSpec(2)));
  constexpr uint64_t kKeys = 6000;
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
  const auto write = [&](float version) {
    return Restore(*table, keys, std::vector<float>(kKeys * kDim, version));
  };
  ASSERT_OK(write(1.0f));
  std::atomic<bool> done{false};
  std::atomic<uint64_t> torn{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      std::vector<float> values(keys.size() * kDim);
      std::unique_ptr<bool[]> found(new bool[keys.size()]);
      while (!done.load()) {
        ASSERT_OK(table
                      ->Lookup(keys, absl::MakeSpan(values),
                               absl::MakeSpan(found.get(), keys.size()),
                               Table::MissingRows::kZeros)
                      .status());
        for (size_t i = 0; i < keys.size(); ++i) {
          const float* row = values.data() + i * kDim;
          if (!std::all_of(row, row + kDim,
                           [&](float v) { return v == row[0]; })) {
            ++torn;
          }
        }
      }
    });
  }
  for (int version = 2; version < 12; ++version) {
    ASSERT_OK(write(static_cast<float>(version)));
    std::vector<uint64_t> some(keys.begin() + version * 300,
                               keys.begin() + version * 300 + 2000);
    ASSERT_OK(table->Erase(some).status());
    if (version % 3 == 0) table->ReleaseUnusedMemory();
  }
  done = true;
  for (std::thread& reader : readers) reader.join();
  EXPECT_EQ(torn.load(), 0u);
}

TEST(ValuesTableTest, RefusesWhatAReplicaNeverDoes) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Table> table,
                       CreateValuesTable(ValuesSpec()));
  const uint64_t key = 3;
  std::vector<float> row(kDim);
  EXPECT_THAT(table->Pull({&key, 1}, absl::MakeSpan(row)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("served values only")));
  EXPECT_THAT(table->Push({&key, 1}, row),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(table->TakeSnapshot(false).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  bool found = false;
  EXPECT_THAT(table
                  ->Lookup({&key, 1}, absl::MakeSpan(row).subspan(1),
                           {&found, 1}, Table::MissingRows::kZeros)
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(table->RestoreRows({&key, 1}, std::vector<char>(5)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(table->Stats().rows, 0u);

  TableSpec adagrad = ValuesSpec();
  adagrad.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
  EXPECT_THAT(CreateValuesTable(adagrad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no optimizer state")));
  TableSpec bad = ValuesSpec();
  bad.dim = 0;
  EXPECT_THAT(CreateValuesTable(bad).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace embedps::embedding
