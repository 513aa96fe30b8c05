// The purely dense data-parallel job across real processes: ps_worker
// dense_worker ranks meeting through a rendezvous directory, reducing their
// gradients with Gloo over loopback.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "dense/model.h"
#include "gtest/gtest.h"
#include "testing/child_process.h"
#include "testing/job_output.h"

namespace embedps::testing {
namespace {

constexpr char kWorker[] = "worker/dense_worker";
constexpr int kInputDim = 16;

struct Job {
  std::string output_dir;
  std::vector<std::string> results;  // each rank's JSON
};

// Runs `world_size` dense_worker processes to completion.
Job RunJob(int world_size, int batch, int steps,
           const std::vector<std::string>& extra) {
  Job job;
  job.output_dir = TestTempPath("dense_job");
  const std::string rendezvous = TestTempPath("rendezvous");
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int rank = 0; rank < world_size; ++rank) {
    std::vector<std::string> args = {absl::StrCat("--rank=", rank),
                                     absl::StrCat("--world_size=", world_size),
                                     "--rendezvous_dir=" + rendezvous,
                                     absl::StrCat("--input_dim=", kInputDim),
                                     "--hidden=32,16",
                                     absl::StrCat("--batch_size=", batch),
                                     absl::StrCat("--steps=", steps),
                                     "--output_dir=" + job.output_dir,
                                     "--log_level=warn",
                                     "--timeout_s=60"};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<std::unique_ptr<ChildProcess>> p =
        ChildProcess::Spawn(kWorker, args);
    EXPECT_OK(p.status());
    if (p.ok()) ranks.push_back(std::move(*p));
  }
  for (auto& rank : ranks) {
    absl::StatusOr<int> code = rank->WaitFor(absl::Seconds(120));
    EXPECT_OK(code.status());
    if (code.ok()) {
      EXPECT_EQ(*code, 0);
    }
  }
  for (int rank = 0; rank < world_size; ++rank) {
    job.results.push_back(
        ReadFile(absl::StrCat(job.output_dir, "/rank-", rank, ".json")));
  }
  return job;
}

std::vector<float> Parameters(const Job& job, int rank) {
  auto model = dense::CreateModel(
      dense::MlpModelSpec(kInputDim, {32, 16}, /*seed=*/0), {});
  EXPECT_OK(model.status());
  const std::string path =
      absl::StrCat(job.output_dir, "/rank-", rank, ".dense");
  EXPECT_OK(dense::LoadParameters(path, **model).status());
  std::vector<float> p((*model)->num_parameters());
  EXPECT_OK((*model)->GetParameters(absl::MakeSpan(p)));
  return p;
}

// 2 ranks × B, each on its half of every global batch, against 1 rank ×
// 2B on all of it, after 50 steps of SGD.
TEST(DenseTrainingTest, TwoRanksOfBReachTheParametersOfOneRankOf2B) {
  const std::vector<std::string> sgd = {"--optimizer=sgd",
                                        "--learning_rate=0.1"};
  const Job two = RunJob(2, 64, 50, sgd);
  const Job one = RunJob(1, 128, 50, sgd);
  const std::vector<float> rank0 = Parameters(two, 0);
  const std::vector<float> rank1 = Parameters(two, 1);
  const std::vector<float> single = Parameters(one, 0);
  EXPECT_EQ(rank0, rank1) << "ranks diverged";
  ASSERT_EQ(rank0.size(), single.size());
  double worst = 0;
  for (size_t i = 0; i < single.size(); ++i) {
    worst =
        std::max(worst, std::abs(static_cast<double>(rank0[i]) - single[i]) /
                            std::max(1.0, std::abs(1.0 * single[i])));
  }
  std::printf("worst relative parameter difference, 2x64 vs 1x128: %.3g\n",
              worst);
  // Tolerance: the two differ only in the order of float additions (the
  // allreduce averages two half-batch means); 1e-5 is ~100 float32 ulps
  // at magnitude 1.
  EXPECT_LT(worst, 1e-5);
  EXPECT_LT(JsonNumber(two.results[0], "final_eval_loss"),
            JsonNumber(two.results[0], "initial_eval_loss"));
}

// 3 ranks × B with Adam converge to the loss of 1 rank × 3B.
TEST(DenseTrainingTest, ThreeRanksConvergeToTheSameLoss) {
  const std::vector<std::string> adam = {"--optimizer=adam",
                                         "--learning_rate=0.003"};
  const Job three = RunJob(3, 64, 400, adam);
  const Job one = RunJob(1, 192, 400, adam);
  const double initial = JsonNumber(one.results[0], "initial_eval_loss");
  const double bayes = JsonNumber(one.results[0], "bayes_eval_loss");
  const double loss1 = JsonNumber(one.results[0], "final_eval_loss");
  for (int rank = 0; rank < 3; ++rank) {
    const double loss3 = JsonNumber(three.results[rank], "final_eval_loss");
    std::printf(
        "rank %d of 3: eval loss %.5f; 1 rank: %.5f; Bayes %.5f; "
        "initial %.5f\n",
        rank, loss3, loss1, bayes, initial);
    EXPECT_NEAR(loss3, loss1, 2e-3);
  }
  // Both closed most of the gap to the Bayes-optimal loss.
  EXPECT_LT(loss1 - bayes, 0.3 * (initial - bayes));
}

// A rank that never arrives: the others fail with a clear timeout instead
// of hanging.
TEST(DenseTrainingTest, MissingRankTimesOutCleanly) {
  const std::string log = TestTempPath("missing_rank.log");
  absl::StatusOr<std::unique_ptr<ChildProcess>> p =
      ChildProcess::Spawn(kWorker,
                          {"--rank=0", "--world_size=2",
                           "--rendezvous_dir=" + TestTempPath("lonely"),
                           "--timeout_s=2", "--steps=10"},
                          "", log);
  ASSERT_OK(p.status());
  ASSERT_OK_AND_ASSIGN(int code, (*p)->WaitFor(absl::Seconds(60)));
  EXPECT_EQ(code, 1);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("rank 0"), std::string::npos) << text;
  EXPECT_NE(text.find("DEADLINE_EXCEEDED"), std::string::npos) << text;
}

TEST(DenseTrainingTest, BadFlagsAreRefused) {
  const std::string log = TestTempPath("bad_flags.log");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--batch_size=0"},
                                             {"--world_size=2"},
                                             {"--hidden=64,x"},
                                             {"--optimizer=lamb"},
                                             {"--device=tpu"}}) {
    ASSERT_OK_AND_ASSIGN(auto p, ChildProcess::Spawn(kWorker, args, "", log));
    ASSERT_OK_AND_ASSIGN(int code, p->WaitFor(absl::Seconds(30)));
    EXPECT_EQ(code, 2) << args[0];
    EXPECT_NE(ReadFile(log).find("INVALID_ARGUMENT"), std::string::npos)
        << args[0] << ": " << ReadFile(log);
  }
}

// --help lists this command's flags and the shared job flags, not the DLRM
// job's (ps_worker --help is checked in training_test).
TEST(DenseTrainingTest, HelpListsTheCommandsOwnFlags) {
  const std::string out = TestTempPath("help.out");
  ASSERT_OK_AND_ASSIGN(auto p, ChildProcess::Spawn(kWorker, {"--help"}, out));
  ASSERT_OK_AND_ASSIGN(int code, p->WaitFor(absl::Seconds(30)));
  EXPECT_EQ(code, 1);  // absl's --help exits 1
  const std::string text = ReadFile(out);
  for (const char* flag :
       {"--hidden", "--steps", "--rank", "--rendezvous_dir", "--device"}) {
    EXPECT_NE(text.find(flag), std::string::npos) << flag << "\n" << text;
  }
  for (const char* flag : {"--config", "--servers", "--restore"}) {
    EXPECT_EQ(text.find(flag), std::string::npos) << flag << "\n" << text;
  }
}

}  // namespace
}  // namespace embedps::testing
