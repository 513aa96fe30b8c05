// The hot-row tier end to end (docs/architecture.md "Hot rows"): real
// ps_server shards and ps_worker processes (Gloo between the workers) train
// the same planted data with and without the tier; the tables they leave
// on the servers (every row, with its optimizer state, read back with
// HotKeys + ReadRows) agree within 1e-5, and so does the test AUC within
// 0.002, while the tier spares most of the Pulls.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "testing/job_cluster.h"
#include "testing/job_output.h"
#include "testing/planted_data.h"

namespace embedps::testing {
namespace {

constexpr char kConfig[] = "deploy/local/dlrm_small.txtpb";

class HotRowsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(TestTempPath("data"));
    ASSERT_OK(WritePlantedData(*data_, 120000, 20000));
  }
  static void TearDownTestSuite() { delete data_; }

  struct Run {
    int exit_code = -1;
    std::string summary;
    std::string log;
    // Every row of the job's table: key → embedding and optimizer state.
    std::map<uint64_t, std::vector<float>> rows;
  };

  // A SYNC job of `workers` workers on two fresh shards; `extra` worker
  // flags.
  Run Train(int workers, const std::vector<std::string>& extra,
            const std::string& name) {
    Run run;
    absl::StatusOr<JobShards> shards = StartJobShards(2, workers);
    EXPECT_OK(shards.status());
    if (!shards.ok()) return run;
    const std::string out = TestTempPath(name + "_out");
    run.log = TestTempPath(name + ".log");
    absl::StatusOr<std::vector<int>> codes = RunWorkers(
        workers,
        [&](int r) {
          std::vector<std::string> args = {
              std::string("--config=") + kConfig,
              shards->servers_flag(),
              absl::StrCat("--rank=", r),
              absl::StrCat("--world_size=", workers),
              "--mode=sync",
              "--train_data=" + *data_ + "/train.txt",
              "--test_data=" + *data_ + "/test.txt",
              "--bayes_metrics=" + *data_ + "/meta.json",
              "--output_dir=" + out,
              "--log_level=info"};
          args.insert(args.end(), extra.begin(), extra.end());
          return args;
        },
        run.log);
    EXPECT_OK(codes.status());
    if (!codes.ok()) return run;
    run.exit_code = (*codes)[0];
    for (int code : *codes) EXPECT_EQ(code, 0) << ReadFile(run.log);
    run.summary = ReadFile(out + "/summary.json");

    client::ClientOptions options;
    options.servers = shards->addresses;
    absl::StatusOr<std::unique_ptr<client::Client>> client =
        client::Client::Connect(options);
    EXPECT_OK(client.status());
    if (!client.ok()) return run;
    absl::StatusOr<client::TableHandle> table = (*client)->OpenTable("criteo");
    EXPECT_OK(table.status());
    if (!table.ok()) return run;
    // Every row: the keys most pulled, as many as there are.
    absl::StatusOr<std::vector<client::Client::HotKey>> all =
        (*client)->HotKeys(*table, 1u << 22);
    EXPECT_OK(all.status());
    if (!all.ok()) return run;
    std::vector<uint64_t> keys;
    for (const client::Client::HotKey& k : *all) keys.push_back(k.key);
    // Adagrad: dim floats of state.
    const size_t record_bytes = 8 + sizeof(float) * 2 * table->dim;
    std::vector<char> records(keys.size() * record_bytes);
    std::unique_ptr<bool[]> found(new bool[keys.size()]);
    EXPECT_OK((*client)->ReadRows(*table, keys, 0, absl::MakeSpan(records),
                                  absl::MakeSpan(found.get(), keys.size())));
    for (size_t i = 0; i < keys.size(); ++i) {
      std::vector<float> floats(2 * table->dim);
      std::memcpy(floats.data(), records.data() + i * record_bytes + 8,
                  sizeof(float) * floats.size());
      run.rows[keys[i]] = std::move(floats);
    }
    for (auto& process : shards->processes) EXPECT_EQ(process->Stop(), 0);
    return run;
  }

  static std::string* data_;
};

std::string* HotRowsTest::data_ = nullptr;

TEST_F(HotRowsTest, TwoSyncWorkersWithTheTierLeaveTheTablesOfTwoWithout) {
  const Run without = Train(2, {"--hot_rows=0"}, "without");
  ASSERT_EQ(without.exit_code, 0) << ReadFile(without.log);
  // The set is chosen at the start (no rows yet: none), then every 25
  // steps, so that refreshes with write-backs happen mid-job.
  const Run with =
      Train(2, {"--hot_rows=100", "--hot_rows_refresh_steps=25"}, "with");
  ASSERT_EQ(with.exit_code, 0) << ReadFile(with.log);

  ASSERT_EQ(with.rows.size(), without.rows.size());
  ASSERT_GT(with.rows.size(), 500u) << "more rows than the tier holds";
  size_t compared = 0;
  double largest = 0;
  for (const auto& [key, floats] : without.rows) {
    const auto it = with.rows.find(key);
    ASSERT_NE(it, with.rows.end()) << key;
    for (size_t f = 0; f < floats.size(); ++f) {
      const double difference = std::fabs(it->second[f] - floats[f]);
      largest = std::max(largest, difference);
      ASSERT_LE(difference, 1e-5) << "key " << key << " float " << f;
    }
    ++compared;
  }
  const double auc_without = JsonNumber(without.summary, "test_auc");
  const double auc_with = JsonNumber(with.summary, "test_auc");
  const double pulled_without =
      JsonNumber(without.summary, "keys_pulled_per_sample");
  const double pulled_with = JsonNumber(with.summary, "keys_pulled_per_sample");
  const double hot_with = JsonNumber(with.summary, "keys_hot_per_sample");
  std::printf(
      "%zu rows equal within %.2g; test AUC %.5f with the tier, %.5f "
      "without; keys pulled per sample %.2f with (+ %.2f from the tier), "
      "%.2f without\n",
      compared, largest, auc_with, auc_without, pulled_with, hot_with,
      pulled_without);
  EXPECT_NEAR(auc_with, auc_without, 0.002);
  EXPECT_LT(pulled_with, pulled_without);
  EXPECT_GT(hot_with, 0.0);
  EXPECT_GT(JsonNumber(with.summary, "hot_rows"), 0.0);
}

}  // namespace
}  // namespace embedps::testing
