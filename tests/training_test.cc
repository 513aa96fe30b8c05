// End-to-end DLRM training on a real local cluster: datagen writes a
// planted data set; real ps_server shards hold the embeddings; real
// ps_worker processes train, meeting through shard 0's Coordination
// service and allreducing their dense gradients with Gloo.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "proto/stats.pb.h"
#include "testing/child_process.h"
#include "testing/job_cluster.h"
#include "testing/job_output.h"
#include "testing/planted_data.h"
#include "testing/server_process.h"
#include "testing/shard_digest.h"

namespace embedps::testing {
namespace {

constexpr char kServer[] = "server/ps_server";
constexpr char kWorker[] = "worker/ps_worker";
constexpr char kConfig[] = "deploy/local/dlrm_small.txtpb";

// One planted data set for the whole suite (small vocabularies, so that
// a few seconds of training get close to the Bayes-optimal AUC).
class TrainingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new std::string(TestTempPath("data"));
    ASSERT_OK(WritePlantedData(*data_, 500000, 50000));
  }
  static void TearDownTestSuite() { delete data_; }

  struct Run {
    int exit_code = -1;
    std::string summary;  // summary.json of rank 0
    std::string log;      // rank 0's stderr
    std::string out;      // rank 0's output_dir
    // Rows and content digest of every table, all shards summed, after
    // the workers ended.
    uint64_t table_rows = 0;
    uint64_t table_digest = 0;
  };

  // Runs `workers` ps_worker processes against `servers` fresh shards.
  Run Train(int servers, int workers, const std::vector<std::string>& extra,
            const std::string& train_file = "",
            const std::vector<std::string>& server_flags = {},
            const std::string& test_file = "") {
    absl::StatusOr<JobShards> shards =
        StartJobShards(servers, workers, server_flags);
    EXPECT_OK(shards.status());
    if (!shards.ok()) return {};
    Run run;
    const std::string out = TestTempPath("out");
    run.out = out;
    run.log = TestTempPath("worker0.log");
    absl::StatusOr<std::vector<int>> codes = RunWorkers(
        workers,
        [&](int r) {
          std::vector<std::string> args = {
              std::string("--config=") + kConfig,
              shards->servers_flag(),
              absl::StrCat("--rank=", r),
              absl::StrCat("--world_size=", workers),
              "--train_data=" +
                  (train_file.empty() ? *data_ + "/train.txt" : train_file),
              "--test_data=" +
                  (test_file.empty() ? *data_ + "/test.txt" : test_file),
              "--bayes_metrics=" + *data_ + "/meta.json",
              "--output_dir=" + out,
              "--log_level=warn"};
          args.insert(args.end(), extra.begin(), extra.end());
          return args;
        },
        run.log);
    EXPECT_OK(codes.status());
    if (codes.ok()) run.exit_code = (*codes)[0];
    run.summary = ReadFile(out + "/summary.json");
    for (const std::string& address : shards->addresses) {
      absl::StatusOr<proto::StatsResponse> response = StatsWithDigests(address);
      EXPECT_OK(response.status());
      if (!response.ok()) continue;
      for (const auto& table : response->table()) {
        run.table_rows += table.rows();
        run.table_digest += table.content_digest();
      }
    }
    return run;
  }

  static std::string* data_;
};

std::string* TrainingTest::data_ = nullptr;

// Sync mode: 2 servers + 2 workers reach the Bayes-optimal AUC within
// 0.01; 1 server + 1 worker with the same global batch reach the same AUC
// within 0.002.
TEST_F(TrainingTest, SyncTwoByTwoNearsBayesAndMatchesOneByOne) {
  const Run two = Train(2, 2, {"--mode=sync"});
  ASSERT_EQ(two.exit_code, 0) << ReadFile(two.log);
  const double auc2 = JsonNumber(two.summary, "test_auc");
  const double bayes = JsonNumber(two.summary, "bayes_test_auc");
  std::printf("sync 2 servers x 2 workers: test AUC %.5f, Bayes %.5f\n", auc2,
              bayes);
  EXPECT_GT(auc2, bayes - 0.01);

  const Run one = Train(1, 1, {"--mode=sync", "--batch_size=1024"});
  ASSERT_EQ(one.exit_code, 0) << ReadFile(one.log);
  const double auc1 = JsonNumber(one.summary, "test_auc");
  std::printf("sync 1 server x 1 worker, batch 1024: test AUC %.5f\n", auc1);
  EXPECT_NEAR(auc1, auc2, 0.002);
}

// DCN-v2 (the cross interaction) through ps_worker and a config alone:
// 1 server + 1 worker near the Bayes-optimal AUC, as the DLRM job gets.
TEST_F(TrainingTest, ACrossNetworkJobNearsBayes) {
  const std::string config = TestTempPath("dcn.txtpb");
  std::ofstream(config) << ReadFile(kConfig)
                        << "\ninteraction: CROSS\ncross_layers: 2\n";
  const Run run = Train(1, 1, {"--config=" + config, "--mode=sync"});
  ASSERT_EQ(run.exit_code, 0) << ReadFile(run.log);
  const double auc = JsonNumber(run.summary, "test_auc");
  const double bayes = JsonNumber(run.summary, "bayes_test_auc");
  std::printf("DCN-v2, 2 cross layers, 1 x 1: test AUC %.5f, Bayes %.5f\n", auc,
              bayes);
  EXPECT_GT(auc, bayes - 0.01);
}

// Rewrites a planted data file so that its ids drift: the lines of segment
// e (of `segments` equal parts) get every categorical value moved to a
// range of their own, as if the vocabulary were replaced; `final_segment`
// >= 0 moves every line to that segment's range (the test set of a model
// trained to the end). The labels and the planted structure stay.
void WriteDriftingData(const std::string& from, const std::string& to,
                       int segments, int final_segment) {
  std::ifstream in(from);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::ofstream out(to, std::ios::trunc);
  for (size_t i = 0; i < lines.size(); ++i) {
    const uint64_t segment =
        final_segment >= 0 ? final_segment : i * segments / lines.size();
    std::vector<std::string> fields = absl::StrSplit(lines[i], '\t');
    for (size_t f = 14; f < fields.size(); ++f) {
      uint64_t value;
      if (fields[f].empty() || !absl::SimpleHexAtoi(fields[f], &value)) {
        continue;
      }
      fields[f] = absl::StrCat(absl::Hex(value + ((segment + 1) << 40)));
    }
    out << absl::StrJoin(fields, "\t") << "\n";
  }
  ASSERT_TRUE(out.flush()) << to;
}

// A job whose ids drift (a new vocabulary every fifth of the data) under
// max_rows holds its rows at the cap, evicting the ids of past segments,
// and reaches the test AUC of the same job without a cap.
TEST_F(TrainingTest, DriftingIdsUnderACapKeepTheAucOfAnUncappedJob) {
  const std::string train = TestTempPath("drift_train.txt");
  const std::string test = TestTempPath("drift_test.txt");
  WriteDriftingData(*data_ + "/train.txt", train, 5, -1);
  WriteDriftingData(*data_ + "/test.txt", test, 5, 4);
  const std::vector<std::string> sweeps = {"--ttl_sweep_interval=200ms"};
  const Run uncapped = Train(1, 1, {}, train, sweeps, test);
  ASSERT_EQ(uncapped.exit_code, 0) << ReadFile(uncapped.log);
  // A segment's distinct ids, about a fifth of what the uncapped job holds;
  // the cap leaves room for one and a half segments.
  const uint64_t cap = uncapped.table_rows * 3 / 10;
  std::string config = ReadFile(kConfig);
  const std::string hint = "expected_rows: 2000000";
  ASSERT_NE(config.find(hint), std::string::npos);
  config.replace(config.find(hint), hint.size(),
                 absl::StrCat(hint, "\n  eviction { max_rows: ", cap, " }"));
  const std::string capped_config = TestTempPath("capped.txtpb");
  std::ofstream(capped_config) << config;
  const Run capped =
      Train(1, 1, {"--config=" + capped_config}, train, sweeps, test);
  ASSERT_EQ(capped.exit_code, 0) << ReadFile(capped.log);
  const double auc_uncapped = JsonNumber(uncapped.summary, "test_auc");
  const double auc_capped = JsonNumber(capped.summary, "test_auc");
  std::printf(
      "drifting ids: uncapped %llu rows, test AUC %.5f; capped at %llu: "
      "%llu rows held, %.0f evicted, test AUC %.5f\n",
      static_cast<unsigned long long>(uncapped.table_rows), auc_uncapped,
      static_cast<unsigned long long>(cap),
      static_cast<unsigned long long>(capped.table_rows),
      JsonNumber(capped.summary, "rows_evicted"), auc_capped);
  EXPECT_NEAR(auc_capped, auc_uncapped, 0.002);
  // Between sweeps (200 ms) the job may add a few thousand rows.
  EXPECT_LE(capped.table_rows, cap + cap / 10);
  EXPECT_GE(JsonNumber(capped.summary, "rows_evicted"),
            static_cast<double>(uncapped.table_rows - cap - cap / 10));
  EXPECT_EQ(JsonNumber(capped.summary, "table_rows"),
            static_cast<double>(capped.table_rows));
  EXPECT_EQ(JsonNumber(uncapped.summary, "rows_evicted"), 0);
}

// Async and bounded staleness converge too (their AUC is printed).
TEST_F(TrainingTest, AsyncAndSspConverge) {
  for (const std::string mode : {"async", "ssp:2"}) {
    const Run run = Train(2, 2, {"--mode=" + mode});
    ASSERT_EQ(run.exit_code, 0) << mode << ": " << ReadFile(run.log);
    const double auc = JsonNumber(run.summary, "test_auc");
    const double bayes = JsonNumber(run.summary, "bayes_test_auc");
    std::printf("%s 2 servers x 2 workers: test AUC %.5f, Bayes %.5f\n",
                mode.c_str(), auc, bayes);
    EXPECT_GT(auc, bayes - 0.02) << mode;
  }
}

// The train loss of the history.csv line at `step` (-1 if none).
double HistoryLoss(const std::string& history, int64_t step) {
  std::istringstream lines(history);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ',');
    int64_t at = 0;
    double loss = 0;
    if (fields.size() > 2 && absl::SimpleAtoi(fields[0], &at) && at == step &&
        absl::SimpleAtod(fields[2], &loss)) {
      return loss;
    }
  }
  return -1;
}

// A job checkpoints (every 25 steps, incremental, and at its end), stops;
// a job restored from the last checkpoint holds exactly its tables and
// dense parameters; a job restored and trained further continues the loss
// where it stopped instead of starting over.
TEST_F(TrainingTest, RestoredJobContinuesFromItsCheckpoint) {
  const std::string root = TestTempPath("checkpoints");
  const std::vector<std::string> common = {
      "--mode=sync", "--checkpoint_dir=" + root, "--checkpoint_every_steps=25",
      "--log_every=5"};
  std::vector<std::string> first_args = common;
  first_args.push_back("--max_steps=60");
  const Run first = Train(2, 2, first_args);
  ASSERT_EQ(first.exit_code, 0) << ReadFile(first.log);
  EXPECT_EQ(JsonNumber(first.summary, "checkpoints"), 3);  // 25, 50, 60
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-000000000060/MANIFEST"));
  const std::string first_history = ReadFile(first.out + "/history.csv");
  const std::string first_dense = ReadFile(first.out + "/dense.params");

  // Restore, train nothing: tables and dense parameters as checkpointed.
  std::vector<std::string> same_args = common;
  same_args.push_back("--max_steps=60");
  same_args.push_back("--restore=" + root);
  const Run same = Train(2, 2, same_args);
  ASSERT_EQ(same.exit_code, 0) << ReadFile(same.log);
  EXPECT_EQ(JsonNumber(same.summary, "start_step"), 60);
  EXPECT_EQ(same.table_rows, first.table_rows);
  EXPECT_EQ(same.table_digest, first.table_digest);
  EXPECT_TRUE(ReadFile(same.out + "/dense.params") == first_dense)
      << "dense parameters differ from the checkpoint's";

  // Restore (into 1 server: resharded) and train 20 more steps.
  std::vector<std::string> more_args = common;
  more_args.push_back("--max_steps=80");
  more_args.push_back("--restore=" + root);
  const Run more = Train(1, 2, more_args);
  ASSERT_EQ(more.exit_code, 0) << ReadFile(more.log);
  const std::string more_history = ReadFile(more.out + "/history.csv");
  const double initial = HistoryLoss(first_history, 5);
  const double stopped = HistoryLoss(first_history, 60);
  const double resumed = HistoryLoss(more_history, 65);
  std::printf("train loss: steps 1-5 %.4f, 56-60 %.4f; resumed 61-65 %.4f\n",
              initial, stopped, resumed);
  ASSERT_GT(initial, 0);
  ASSERT_GT(stopped, 0);
  ASSERT_GT(resumed, 0);
  EXPECT_LT(stopped, initial - 0.05) << "the first job did not learn";
  EXPECT_LT(std::abs(resumed - stopped), (initial - stopped) / 3)
      << "the resumed loss jumped back towards the initial loss";
}

// Malformed lines are counted and skipped; with fatal_bad_lines they stop
// the job with the file and line named.
TEST_F(TrainingTest, BadDataIsSkippedOrFatal) {
  const std::string bad = TestTempPath("bad_train.txt");
  {
    std::ifstream in(*data_ + "/train.txt");
    std::ofstream out(bad);
    std::string line;
    for (int i = 0; i < 20000 && std::getline(in, line); ++i) {
      if (i == 7) out << "1\tnot-a-number\n";
      if (i == 100) out << line.substr(0, line.size() / 2) << "\n";
      out << line << "\n";
    }
  }
  const Run skip = Train(1, 1, {}, bad);
  ASSERT_EQ(skip.exit_code, 0) << ReadFile(skip.log);
  EXPECT_EQ(JsonNumber(skip.summary, "bad_lines"), 2);
  EXPECT_NE(ReadFile(skip.log).find(bad + ":8"), std::string::npos)
      << ReadFile(skip.log);

  const std::string fatal_config = TestTempPath("fatal.txtpb");
  std::ofstream(fatal_config)
      << ReadFile(kConfig) << "\nfatal_bad_lines: true\n";
  auto server = ServerProcess::Start(kServer, {});
  ASSERT_OK(server.status());
  const std::string log = TestTempPath("fatal.log");
  auto worker = ChildProcess::Spawn(
      kWorker,
      {"--config=" + fatal_config, "--servers=" + (*server)->address(),
       "--train_data=" + bad, "--test_data=" + *data_ + "/test.txt"},
      "", log);
  ASSERT_OK(worker.status());
  ASSERT_OK_AND_ASSIGN(int code, (*worker)->WaitFor(absl::Seconds(120)));
  EXPECT_EQ(code, 1);
  EXPECT_NE(ReadFile(log).find("malformed line " + bad + ":8"),
            std::string::npos)
      << ReadFile(log);
}

// A SYNC step that cannot run (its whole batch malformed) ends the job at
// once with the step's error: the next step's Pull, already waiting on the
// server for a step that will never be pushed, is cancelled (it would hold
// the worker for the step timeout, 300 s).
TEST_F(TrainingTest, ASyncStepThatFailsEndsTheJobAtOnce) {
  const std::string bad = TestTempPath("empty_batch_train.txt");
  {
    std::ifstream in(*data_ + "/train.txt");
    std::ofstream out(bad);
    std::string line;
    // Batches of 512: step 2 is lines [1024, 1536).
    for (int i = 0; i < 4096 && std::getline(in, line); ++i) {
      out << (i >= 1024 && i < 1536 ? "1\tnot-a-number" : line) << "\n";
    }
  }
  auto server = ServerProcess::Start(kServer, {});
  ASSERT_OK(server.status());
  const std::string log = TestTempPath("empty_batch.log");
  auto worker = ChildProcess::Spawn(
      kWorker,
      {std::string("--config=") + kConfig, "--mode=sync",
       "--servers=" + (*server)->address(), "--train_data=" + bad,
       "--test_data=" + *data_ + "/test.txt"},
      "", log);
  ASSERT_OK(worker.status());
  ASSERT_OK_AND_ASSIGN(int code, (*worker)->WaitFor(absl::Seconds(60)));
  EXPECT_EQ(code, 1);
  EXPECT_NE(ReadFile(log).find("step 2: step 2 of worker 0 has no valid line"),
            std::string::npos)
      << ReadFile(log);
}

// datagen refuses flags it cannot use, saying which.
TEST_F(TrainingTest, DatagenRefusesBadFlags) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--train_rows=10"},  // no --output_dir
           {"--output_dir=" + TestTempPath("dg"), "--vocab=10,0"},
           {"--output_dir=" + TestTempPath("dg"), "--vocab=ten"}}) {
    const std::string log = TestTempPath("datagen.log");
    ASSERT_OK_AND_ASSIGN(auto p,
                         ChildProcess::Spawn("tools/datagen", args, "", log));
    ASSERT_OK_AND_ASSIGN(int code, p->WaitFor(absl::Seconds(30)));
    EXPECT_EQ(code, 2) << args.back();
    EXPECT_NE(ReadFile(log).find("datagen: --"), std::string::npos)
        << ReadFile(log);
  }
}

// --help shows the DLRM job's flags and the shared job flags, not the
// dense job's; a missing --config is refused with what to do.
TEST_F(TrainingTest, WorkerHelpAndMissingConfig) {
  const std::string out = TestTempPath("help.out");
  ASSERT_OK_AND_ASSIGN(auto help,
                       ChildProcess::Spawn(kWorker, {"--help"}, out));
  ASSERT_OK_AND_ASSIGN(int code, help->WaitFor(absl::Seconds(30)));
  EXPECT_EQ(code, 1);  // absl's --help exits 1
  const std::string text = ReadFile(out);
  for (const char* flag :
       {"--config", "--servers", "--restore", "--rank", "--device"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag << "\n" << text;
  }
  for (const char* flag : {"--hidden", "--teacher_hidden", "--model"}) {
    EXPECT_EQ(text.find(flag), std::string::npos) << flag << "\n" << text;
  }
  const std::string log = TestTempPath("no_config.log");
  ASSERT_OK_AND_ASSIGN(
      auto p, ChildProcess::Spawn(kWorker, {"--servers=x:1"}, "", log));
  ASSERT_OK_AND_ASSIGN(code, p->WaitFor(absl::Seconds(30)));
  EXPECT_EQ(code, 2);
  EXPECT_NE(ReadFile(log).find("--config=FILE is required"), std::string::npos)
      << ReadFile(log);
}

// A second job started against servers that a finished SYNC job used is
// refused with what to do (the servers' steps belong to the first job);
// and a test set smaller than a batch is evaluated whole.
TEST_F(TrainingTest, SecondJobOnUsedServersAndASmallTestSet) {
  const std::string small_test = TestTempPath("small_test.txt");
  {
    std::ifstream in(*data_ + "/test.txt");
    std::ofstream out(small_test);
    std::string line;
    for (int i = 0; i < 200 && std::getline(in, line); ++i) out << line << "\n";
  }
  auto server = ServerProcess::Start(kServer, {});
  ASSERT_OK(server.status());
  const std::string first_out = TestTempPath("first");
  const auto job = [&](const std::string& name, const std::string& out) {
    const std::string log = TestTempPath(name + ".log");
    auto worker = ChildProcess::Spawn(
        kWorker,
        {std::string("--config=") + kConfig,
         "--servers=" + (*server)->address(),
         "--train_data=" + *data_ + "/train.txt", "--test_data=" + small_test,
         "--max_steps=12", "--batch_size=512", "--output_dir=" + out,
         "--log_level=warn"},
        "", log);
    EXPECT_OK(worker.status());
    absl::StatusOr<int> code = (*worker)->WaitFor(absl::Seconds(120));
    EXPECT_OK(code.status());
    return std::make_pair(code.ok() ? *code : -1, ReadFile(log));
  };
  const auto [first_code, first_log] = job("first", first_out);
  ASSERT_EQ(first_code, 0) << first_log;
  const std::string summary = ReadFile(first_out + "/summary.json");
  EXPECT_GT(JsonNumber(summary, "test_auc"), 0.6) << summary;
  const auto [second_code, second_log] = job("second", TestTempPath("second"));
  EXPECT_EQ(second_code, 1);
  EXPECT_NE(second_log.find("restart the servers"), std::string::npos)
      << second_log;
  EXPECT_NE(second_log.find("--restore"), std::string::npos) << second_log;
}

// While it trains, a worker serves Prometheus metrics; its summary splits
// the time between pulls, compute and pushes.
TEST_F(TrainingTest, WorkerServesMetricsWhileTraining) {
  auto server = ServerProcess::Start(kServer, {});
  ASSERT_OK(server.status());
  const std::string port_file = TestTempPath("metrics_port");
  const std::string out = TestTempPath("metrics_out");
  auto worker = ChildProcess::Spawn(
      kWorker,
      {std::string("--config=") + kConfig, "--servers=" + (*server)->address(),
       "--train_data=" + *data_ + "/train.txt",
       "--test_data=" + *data_ + "/test.txt", "--metrics_port=0",
       "--metrics_port_file=" + port_file, "--output_dir=" + out,
       "--log_level=warn"});
  ASSERT_OK(worker.status());
  int port = 0;
  for (int i = 0; i < 300 && port == 0; ++i) {
    std::ifstream(port_file) >> port;
    if (port == 0) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GT(port, 0) << "no metrics port file";
  httplib::Client http("127.0.0.1", port);
  std::string page;
  for (int i = 0; i < 100; ++i) {
    auto response = http.Get("/metrics");
    if (response && response->status == 200 &&
        response->body.find("embedps_worker_steps_total{rank=\"0\"} 0\n") ==
            std::string::npos) {
      page = response->body;
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_NE(page.find("# TYPE embedps_worker_steps_total counter"),
            std::string::npos)
      << page;
  EXPECT_NE(page.find("embedps_worker_pull_wait_seconds_total{rank=\"0\"}"),
            std::string::npos)
      << page;
  ASSERT_OK_AND_ASSIGN(int code, (*worker)->WaitFor(absl::Seconds(120)));
  EXPECT_EQ(code, 0);
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_GT(JsonNumber(summary, "compute_seconds"), 0);
  EXPECT_GE(JsonNumber(summary, "pull_wait_seconds"), 0);
  EXPECT_GE(JsonNumber(summary, "push_seconds"), 0);
}

// A server that dies: the worker retries within its deadline, then fails
// with a clear message instead of hanging.
TEST_F(TrainingTest, LostServerFailsClearlyAfterTheRetryDeadline) {
  auto server = ServerProcess::Start(kServer, {});
  ASSERT_OK(server.status());
  const std::string log = TestTempPath("lost.log");
  auto worker = ChildProcess::Spawn(
      kWorker,
      {std::string("--config=") + kConfig, "--servers=" + (*server)->address(),
       "--train_data=" + *data_ + "/train.txt",
       "--test_data=" + *data_ + "/test.txt", "--retry_deadline_s=3"},
      "", log);
  ASSERT_OK(worker.status());
  absl::SleepFor(absl::Seconds(2));
  (*server)->Signal(SIGKILL);
  (*server)->Wait();
  ASSERT_OK_AND_ASSIGN(int code, (*worker)->WaitFor(absl::Seconds(60)));
  EXPECT_EQ(code, 1);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("UNAVAILABLE"), std::string::npos) << text;
}

// --restore of a directory without a complete checkpoint: exit 1, the
// directory named, before any training.
TEST_F(TrainingTest, RestoreWithoutACheckpointIsRefused) {
  auto server = ServerProcess::Start(kServer, {});
  ASSERT_OK(server.status());
  const std::string empty = TestTempPath("no_checkpoints");
  std::filesystem::create_directories(empty);
  const std::string log = TestTempPath("restore.log");
  auto worker = ChildProcess::Spawn(
      kWorker,
      {std::string("--config=") + kConfig, "--servers=" + (*server)->address(),
       "--train_data=" + *data_ + "/train.txt", "--restore=" + empty},
      "", log);
  ASSERT_OK(worker.status());
  ASSERT_OK_AND_ASSIGN(int code, (*worker)->WaitFor(absl::Seconds(60)));
  EXPECT_EQ(code, 1);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("no complete checkpoint in '" + empty), std::string::npos)
      << text;
}

// A worker given two servers that both say they are shard 0 of 1 (started
// with the defaults) refuses them before training, naming both; and one
// given a --cluster_id its server does not state refuses it.
TEST_F(TrainingTest, AWorkerRefusesAMisconfiguredCluster) {
  auto a = ServerProcess::Start(kServer, {});
  auto b = ServerProcess::Start(kServer, {});
  ASSERT_OK(a.status());
  ASSERT_OK(b.status());
  for (const auto& [extra, says] : std::vector<
           std::pair<std::vector<std::string>, std::vector<std::string>>>{
           {{"--servers=" + (*a)->address() + "," + (*b)->address()},
            {"server 0 (" + (*a)->address() + ") says it is a training shard",
             "server 1 (" + (*b)->address() + ") says it is a training shard",
             "both claim shard 0"}},
           {{"--servers=" + (*a)->address(), "--cluster_id=prod"},
            {"not of cluster 'prod'"}}}) {
    const std::string log = TestTempPath("misconfigured.log");
    std::vector<std::string> args = {std::string("--config=") + kConfig,
                                     "--train_data=" + *data_ + "/train.txt"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto worker = ChildProcess::Spawn(kWorker, args, "", log);
    ASSERT_OK(worker.status());
    ASSERT_OK_AND_ASSIGN(int code, (*worker)->WaitFor(absl::Seconds(60)));
    EXPECT_NE(code, 0);
    const std::string text = ReadFile(log);
    for (const std::string& said : says) {
      EXPECT_NE(text.find(said), std::string::npos) << said << "\n" << text;
    }
  }
  // Nothing was created on either server.
  for (const auto* server : {&*a, &*b}) {
    client::ClientOptions options;
    options.servers = {(*server)->address()};
    ASSERT_OK_AND_ASSIGN(auto client, client::Client::Connect(options));
    ASSERT_OK_AND_ASSIGN(const auto stats, client->Stats());
    EXPECT_EQ(stats[0].table_size(), 0);
  }
}

// A worker that dies mid-training makes its SYNC peer fail with a clear
// error (the broken allreduce, or the step timeout) instead of waiting
// forever.
TEST_F(TrainingTest, DeadWorkerFailsSyncPeersClearly) {
  auto server = ServerProcess::Start(kServer, {"--num_workers=2"});
  ASSERT_OK(server.status());
  std::vector<std::unique_ptr<ChildProcess>> workers;
  const std::string log = TestTempPath("survivor.log");
  for (int r = 0; r < 2; ++r) {
    auto worker = ChildProcess::Spawn(
        kWorker,
        {std::string("--config=") + kConfig,
         "--servers=" + (*server)->address(), absl::StrCat("--rank=", r),
         "--world_size=2", "--mode=sync", "--timeout_s=5", "--step_timeout_s=5",
         "--train_data=" + *data_ + "/train.txt",
         "--test_data=" + *data_ + "/test.txt"},
        "", r == 0 ? log : "/dev/null");
    ASSERT_OK(worker.status());
    workers.push_back(std::move(*worker));
  }
  absl::SleepFor(absl::Seconds(3));
  workers[1]->Signal(SIGKILL);
  workers[1]->Wait();
  const absl::Time killed = absl::Now();
  ASSERT_OK_AND_ASSIGN(int code, workers[0]->WaitFor(absl::Seconds(60)));
  std::printf("the survivor exited %.1f s after its peer was killed\n",
              absl::ToDoubleSeconds(absl::Now() - killed));
  EXPECT_EQ(code, 1);
  const std::string text = ReadFile(log);
  EXPECT_TRUE(text.find("DEADLINE_EXCEEDED") != std::string::npos ||
              text.find("UNAVAILABLE") != std::string::npos)
      << text;
  std::printf("survivor's last lines:\n%s\n",
              text.substr(text.size() > 600 ? text.size() - 600 : 0).c_str());
}

// A shard killed mid-job and restarted from the job's last checkpoint on
// its old port holds an earlier step than the job: the workers must not
// train on it. Both stop, within their timeouts, and the error says what
// happened and what to do.
TEST_F(TrainingTest, AShardRestartedBehindTheJobStopsItClearly) {
  std::vector<std::unique_ptr<ServerProcess>> servers;
  std::vector<std::string> addresses;
  for (int s = 0; s < 2; ++s) {
    ASSERT_OK_AND_ASSIGN(
        auto server,
        ServerProcess::Start(kServer, {absl::StrCat("--shard_index=", s),
                                       "--num_shards=2", "--num_workers=2"}));
    addresses.push_back(server->address());
    servers.push_back(std::move(server));
  }
  const std::string root = std::string(std::getenv("TEST_TMPDIR")) + "/job";
  std::vector<std::unique_ptr<ChildProcess>> workers;
  std::vector<std::string> logs;
  for (int r = 0; r < 2; ++r) {
    logs.push_back(TestTempPath(absl::StrCat("restarted_shard_worker", r)));
    ASSERT_OK_AND_ASSIGN(
        auto worker,
        ChildProcess::Spawn(
            kWorker,
            {std::string("--config=") + kConfig,
             "--servers=" + absl::StrJoin(addresses, ","),
             absl::StrCat("--rank=", r), "--world_size=2", "--mode=sync",
             "--timeout_s=20", "--step_timeout_s=20", "--epochs=20",
             "--checkpoint_dir=" + root, "--checkpoint_every_steps=10",
             "--train_data=" + *data_ + "/train.txt",
             "--test_data=" + *data_ + "/test.txt"},
            "", logs.back()));
    workers.push_back(std::move(worker));
  }
  // Once a checkpoint is complete, shard 1 dies and comes back from it.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  bool checkpointed = false;
  while (!checkpointed && absl::Now() < give_up) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(root, error)) {
      if (std::filesystem::exists(entry.path() / "MANIFEST")) {
        checkpointed = true;
      }
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(checkpointed);
  absl::SleepFor(absl::Milliseconds(500));
  const std::string port = addresses[1].substr(addresses[1].rfind(':') + 1);
  servers[1]->Signal(SIGKILL);
  servers[1]->Wait();
  ASSERT_OK_AND_ASSIGN(
      servers[1],
      ServerProcess::Start(
          kServer, {"--shard_index=1", "--num_shards=2", "--num_workers=2",
                    "--port=" + port, "--restore=" + root}));
  const absl::Time restarted = absl::Now();
  std::string told;
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK_AND_ASSIGN(int code, workers[r]->WaitFor(absl::Seconds(120)));
    const std::string text = ReadFile(logs[r]);
    EXPECT_NE(code, 0) << "worker " << r << " trained on:\n" << text;
    if (text.find("is a new server process") != std::string::npos) {
      told = text;
    }
  }
  std::printf("both workers stopped %.1f s after the restart\n",
              absl::ToDoubleSeconds(absl::Now() - restarted));
  ASSERT_FALSE(told.empty()) << ReadFile(logs[0]) << ReadFile(logs[1]);
  const size_t at = told.rfind("shard 1 (");
  std::printf("what a worker said: %s\n", told.substr(at).c_str());
  EXPECT_NE(told.find("shard 1"), std::string::npos) << told;
  EXPECT_NE(told.find("from a checkpoint of step"), std::string::npos) << told;
  EXPECT_NE(told.find("--restore"), std::string::npos) << told;
}

}  // namespace
}  // namespace embedps::testing
