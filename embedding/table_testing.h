// The fixture of the Table contract's tests (table_test.cc,
// table_records_test.cc): every test runs against a memory-only table and
// against one whose memory budget is one row per stripe, so that nearly
// every row lives in the spill tier (RocksDB) between touches.
#ifndef EMBEDPS_EMBEDDING_TABLE_TESTING_H_
#define EMBEDPS_EMBEDDING_TABLE_TESTING_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "embedding/initializer.h"
#include "embedding/table.h"
#include "gtest/gtest.h"

namespace embedps::embedding {

constexpr int kDim = 8;

inline TableSpec SgdSpec(const std::string& name = "t") {
  TableSpec spec;
  spec.name = name;
  spec.dim = kDim;
  spec.seed = 5;
  spec.optimizer.kind = OptimizerSpec::Kind::kSgd;
  spec.optimizer.learning_rate = 0.5f;
  return spec;
}

inline std::vector<float> InitialOf(const TableSpec& spec, uint64_t key) {
  std::vector<float> row(spec.dim);
  InitialRow(spec.initializer, spec.seed, key, absl::MakeSpan(row));
  return row;
}

// Every test of the Table contract runs twice: against a memory-only table
// and against one whose memory budget is one row per stripe, so that nearly
// every row lives in the spill tier (RocksDB) between touches.
class TableContractTest : public ::testing::TestWithParam<bool> {
 protected:
  bool spilling() const { return GetParam(); }

  absl::StatusOr<std::unique_ptr<Table>> MakeTable(TableSpec spec,
                                                   TableOptions options = {}) {
    if (spilling()) {
      spec.memory_budget_bytes = 1;
      options.spill_directory = absl::StrCat(
          ::testing::TempDir(), "/spill_",
          ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_",
          tables_made_++);
    }
    return Table::Create(spec, std::move(options));
  }

 private:
  int tables_made_ = 0;
};

// The parameter's name in test names.
inline std::string TierName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Spilling" : "MemoryOnly";
}

}  // namespace embedps::embedding

#endif  // EMBEDPS_EMBEDDING_TABLE_TESTING_H_
