// The hot-row tier end to end (docs/architecture.md "Hot rows"): real
// ps_server shards and ps_worker processes (Gloo between the workers) train
// the same planted data with and without the tier; the tables they leave
// on the servers (every row, with its optimizer state, read back with
// HotKeys + ReadRows) agree within 1e-5, and so does the test AUC within
// 0.002, while the tier spares most of the Pulls.
#include <signal.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "testing/child_process.h"
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

  // Rank r's flags in a SYNC job of `workers` workers on `shards`.
  static std::vector<std::string> WorkerArgs(
      const JobShards& shards, int r, int workers,
      const std::vector<std::string>& extra, const std::string& out) {
    std::vector<std::string> args = {std::string("--config=") + kConfig,
                                     shards.servers_flag(),
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
  }

  // Every row of the job's table on `shards`, with its optimizer state
  // (all keys, most pulled first: HotKeys of as many as there are).
  static std::map<uint64_t, std::vector<float>> ReadTable(
      const JobShards& shards) {
    std::map<uint64_t, std::vector<float>> rows;
    client::ClientOptions options;
    options.servers = shards.addresses;
    absl::StatusOr<std::unique_ptr<client::Client>> client =
        client::Client::Connect(options);
    EXPECT_OK(client.status());
    if (!client.ok()) return rows;
    absl::StatusOr<client::TableHandle> table = (*client)->OpenTable("criteo");
    EXPECT_OK(table.status());
    if (!table.ok()) return rows;
    absl::StatusOr<std::vector<client::Client::HotKey>> all =
        (*client)->HotKeys(*table, 1u << 22);
    EXPECT_OK(all.status());
    if (!all.ok()) return rows;
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
      rows[keys[i]] = std::move(floats);
    }
    return rows;
  }

  // A SYNC job of `workers` workers on two fresh shards, run to its end;
  // `extra` worker flags.
  Run Train(int workers, const std::vector<std::string>& extra,
            const std::string& name, bool expect_success = true) {
    Run run;
    absl::StatusOr<JobShards> shards = StartJobShards(2, workers);
    EXPECT_OK(shards.status());
    if (!shards.ok()) return run;
    const std::string out = TestTempPath(name + "_out");
    run.log = TestTempPath(name + ".log");
    absl::StatusOr<std::vector<int>> codes = RunWorkers(
        workers,
        [&](int r) { return WorkerArgs(*shards, r, workers, extra, out); },
        run.log);
    EXPECT_OK(codes.status());
    if (!codes.ok()) return run;
    run.exit_code = (*codes)[0];
    if (!expect_success) return run;
    for (int code : *codes) EXPECT_EQ(code, 0) << ReadFile(run.log);
    run.summary = ReadFile(out + "/summary.json");
    run.rows = ReadTable(*shards);
    for (auto& process : shards->processes) EXPECT_EQ(process->Stop(), 0);
    return run;
  }

  // The largest difference between two tables' floats; fails if their keys
  // differ.
  static double LargestDifference(
      const std::map<uint64_t, std::vector<float>>& a,
      const std::map<uint64_t, std::vector<float>>& b) {
    EXPECT_EQ(a.size(), b.size());
    double largest = 0;
    for (const auto& [key, floats] : a) {
      const auto it = b.find(key);
      if (it == b.end()) {
        ADD_FAILURE() << "key " << key << " is in one table only";
        return 1e9;
      }
      for (size_t f = 0; f < floats.size(); ++f) {
        largest =
            std::max<double>(largest, std::fabs(it->second[f] - floats[f]));
      }
    }
    return largest;
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

  ASSERT_GT(with.rows.size(), 500u) << "more rows than the tier holds";
  const double largest = LargestDifference(without.rows, with.rows);
  EXPECT_LE(largest, 1e-5);
  const size_t compared = with.rows.size();
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

// A worker killed while the tier holds rows: its peer stops with a clear
// error; a job restored from the last checkpoint (whose tables hold the
// tier's rows, written back before the snapshot) ends with the tables of
// the same job run without a stop.
TEST_F(HotRowsTest, AKilledWorkerResumesFromTheCheckpointWithTheTiersRows) {
  const auto flags = [](const std::string& root) {
    return std::vector<std::string>{"--hot_rows=100",
                                    "--hot_rows_warmup_steps=5",
                                    "--checkpoint_dir=" + root,
                                    "--checkpoint_every_steps=20",
                                    "--timeout_s=5",
                                    "--step_timeout_s=5"};
  };
  const Run whole = Train(2, flags(TestTempPath("whole_ckpt")), "whole");
  ASSERT_EQ(whole.exit_code, 0) << ReadFile(whole.log);

  const std::string root = TestTempPath("killed_ckpt");
  {
    ASSERT_OK_AND_ASSIGN(JobShards shards, StartJobShards(2, 2));
    const std::string log = TestTempPath("killed.log");
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    for (int r = 0; r < 2; ++r) {
      ASSERT_OK_AND_ASSIGN(
          auto rank, ChildProcess::Spawn("worker/ps_worker",
                                         WorkerArgs(shards, r, 2, flags(root),
                                                    TestTempPath("killed_out")),
                                         "", r == 0 ? log : "/dev/null"));
      ranks.push_back(std::move(rank));
    }
    // Killed as soon as the first checkpoint is complete (the tier took
    // its rows at step 5).
    const std::string manifest = root + "/ckpt-000000000020/MANIFEST";
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (!std::filesystem::exists(manifest) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    ASSERT_TRUE(std::filesystem::exists(manifest)) << ReadFile(log);
    ranks[1]->Signal(SIGKILL);
    ASSERT_OK_AND_ASSIGN(const int code, ranks[0]->WaitFor(absl::Seconds(60)));
    EXPECT_NE(code, 0) << "rank 0 went on without its peer";
    const std::string text = ReadFile(log);
    EXPECT_TRUE(text.find("DEADLINE_EXCEEDED") != std::string::npos ||
                text.find("UNAVAILABLE") != std::string::npos)
        << text;
    for (auto& process : shards.processes) process->Stop();
  }
  std::vector<std::string> resumed_flags = flags(root);
  resumed_flags.push_back("--restore=" + root);
  const Run resumed = Train(2, resumed_flags, "resumed");
  ASSERT_EQ(resumed.exit_code, 0) << ReadFile(resumed.log);
  const double start = JsonNumber(resumed.summary, "start_step");
  EXPECT_GE(start, 20);
  const double largest = LargestDifference(whole.rows, resumed.rows);
  std::printf(
      "resumed at step %.0f: %zu rows, within %.2g of the job run "
      "without a stop\n",
      start, resumed.rows.size(), largest);
  EXPECT_LE(largest, 1e-5);
}

// A tier that cannot fit is refused at the start, naming the flag and the
// bytes.
TEST_F(HotRowsTest, ATierThatCannotFitIsRefused) {
  const Run refused =
      Train(1, {"--hot_rows=2000000000"}, "refused", /*expect_success=*/false);
  EXPECT_NE(refused.exit_code, 0);
  const std::string text = ReadFile(refused.log);
  EXPECT_NE(text.find("hot_rows_per_table (--hot_rows) = 2000000000 needs"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace embedps::testing
