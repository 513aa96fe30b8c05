// End-to-end training on columns that are not Criteo's: schema_datagen
// writes a planted data set with counts, a real, ids, lists and a weighted
// list; a real ps_server holds the embeddings and real ps_worker
// processes train deploy/local/schema_small.txtpb's schema on it; a
// serving replica and ps_predictor then serve the model trained.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/serving_client.h"
#include "common/status_matchers.h"
#include "dense/dense_model.pb.h"
#include "dense/eval_metrics.h"
#include "dense/model.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/serving.grpc.pb.h"
#include "testing/child_process.h"
#include "testing/job_output.h"
#include "testing/server_process.h"

namespace embedps::testing {
namespace {

constexpr char kServer[] = "server/ps_server";
constexpr char kWorker[] = "worker/ps_worker";
constexpr char kPredictor[] = "worker/ps_predictor";
constexpr char kConfig[] = "deploy/local/schema_small.txtpb";

// The planted data set (written once for the suite).
const std::string& Data() {
  static const std::string* data = [] {
    auto* dir = new std::string(TestTempPath("schema_data"));
    auto datagen = ChildProcess::Spawn(
        "tools/schema_datagen", {"--output_dir=" + *dir, "--train_rows=200000",
                                 "--test_rows=20000", "--vocab=20,50,100"});
    EXPECT_OK(datagen.status());
    if (datagen.ok()) {
      EXPECT_EQ((*datagen)->Wait(), 0);
    }
    return dir;
  }();
  return *data;
}

// Trains `workers` ranks against `servers` shards; rank 0's summary.
// `more`: further ps_worker flags; `out`: the output_dir (default: a new
// one).
std::string Train(const std::string& data, int servers, int workers,
                  const std::vector<std::string>& more = {},
                  std::unique_ptr<ServerProcess>* kept = nullptr,
                  std::string out = "") {
  std::vector<std::unique_ptr<ServerProcess>> shards;
  std::vector<std::string> addresses;
  for (int s = 0; s < servers; ++s) {
    auto shard = ServerProcess::Start(
        kServer, {absl::StrCat("--shard_index=", s),
                  absl::StrCat("--num_shards=", servers),
                  absl::StrCat("--num_workers=", workers)});
    EXPECT_OK(shard.status());
    if (!shard.ok()) return "";
    addresses.push_back((*shard)->address());
    shards.push_back(*std::move(shard));
  }
  if (out.empty()) out = TestTempPath("out");
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < workers; ++r) {
    std::vector<std::string> args = {
        std::string("--config=") + kConfig,
        "--servers=" + absl::StrJoin(addresses, ","),
        absl::StrCat("--rank=", r),
        absl::StrCat("--world_size=", workers),
        "--train_data=" + data + "/train.tsv",
        "--test_data=" + data + "/test.tsv",
        "--bayes_metrics=" + data + "/meta.json",
        "--output_dir=" + out,
        "--log_level=warn"};
    args.insert(args.end(), more.begin(), more.end());
    auto rank = ChildProcess::Spawn(kWorker, args);
    EXPECT_OK(rank.status());
    if (rank.ok()) ranks.push_back(*std::move(rank));
  }
  for (auto& rank : ranks) {
    absl::StatusOr<int> code = rank->WaitFor(absl::Seconds(300));
    EXPECT_OK(code.status());
    if (code.ok()) {
      EXPECT_EQ(*code, 0);
    }
  }
  if (kept != nullptr && !shards.empty()) *kept = std::move(shards[0]);
  return ReadFile(out + "/summary.json");
}

// One epoch over 200k samples: the test AUC comes near the planted
// model's Bayes-optimal AUC, with one worker and with two.
TEST(SchemaTrainingTest, TrainsListsAndWeightsToNearTheTruth) {
  const std::string& data = Data();
  for (const auto& [servers, workers] : {std::pair{1, 1}, std::pair{2, 2}}) {
    const std::string summary = Train(data, servers, workers);
    const double auc = JsonNumber(summary, "test_auc");
    const double bayes = JsonNumber(summary, "bayes_test_auc");
    std::printf("schema job %d + %d: test auc %.5f, Bayes-optimal %.5f\n",
                servers, workers, auc, bayes);
    EXPECT_GT(bayes, 0.7);
    EXPECT_GT(auc, bayes - 0.02) << summary;
    EXPECT_LE(auc, bayes + 0.01) << summary;
  }
}

// The test file's lines without their label (the first column), and the
// labels.
void TestLines(const std::string& path, std::vector<std::string>* lines,
               std::vector<float>* labels) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);  // the header row
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    labels->push_back(line.substr(0, tab) == "1" ? 1.0f : 0.0f);
    lines->push_back(line.substr(tab + 1));
  }
}

// The model trained on the schema's columns is served: a replica loads
// the job's last checkpoint, ps_predictor resolves the schema's header
// and STANDARDIZE statistics from what the model records (no training
// file at hand), and Predict of the test lines (label cut) gives the
// job's own test AUC.
TEST(SchemaTrainingTest, ThePredictorServesTheSchemaModel) {
  const std::string& data = Data();
  const std::string checkpoints = TestTempPath("schema_checkpoints");
  std::unique_ptr<ServerProcess> training;
  const std::string summary = Train(
      data, 1, 1,
      {"--checkpoint_dir=" + checkpoints, "--checkpoint_every_steps=100000"},
      &training);
  ASSERT_NE(training, nullptr);
  const auto final_step = static_cast<uint64_t>(JsonNumber(summary, "steps"));
  ASSERT_OK_AND_ASSIGN(
      auto replica,
      ServerProcess::Start(
          kServer,
          {"--role=serving", "--follow_checkpoints=" + checkpoints,
           "--training_servers=" + training->address(),
           "--checkpoint_poll=200ms", "--log_level=warn"},
          absl::Seconds(120)));
  {
    client::ServingClientOptions options;
    options.replicas = {{replica->address()}};
    ASSERT_OK_AND_ASSIGN(auto serving, client::ServingClient::Connect(options));
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (serving->Versions()[0][0].step() < final_step &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    ASSERT_GE(serving->Versions()[0][0].step(), final_step);
  }
  // The config's train_files do not exist here: the model's record is
  // all the predictor has.
  const std::vector<std::string> args = {
      std::string("--config=") + kConfig, "--serving=" + replica->address(),
      "--deadline_ms=5000", "--log_level=warn"};
  ASSERT_OK_AND_ASSIGN(auto predictor, ServerProcess::Start(kPredictor, args));
  auto stub = proto::Predictor::NewStub(grpc::CreateChannel(
      predictor->address(), grpc::InsecureChannelCredentials()));
  std::vector<std::string> lines;
  std::vector<float> labels;
  TestLines(data + "/test.tsv", &lines, &labels);
  ASSERT_EQ(lines.size(), 20000u);
  std::vector<float> probabilities;
  for (size_t first = 0; first < lines.size(); first += 1000) {
    proto::PredictRequest request;
    for (size_t i = first; i < first + 1000; ++i) request.add_line(lines[i]);
    proto::PredictResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->Predict(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.version(), final_step);
    probabilities.insert(probabilities.end(), response.probability().begin(),
                         response.probability().end());
  }
  const double auc = dense::RocAuc(probabilities, labels);
  std::printf("Predict test AUC %.6f; the job's %.6f\n", auc,
              JsonNumber(summary, "test_auc"));
  EXPECT_NEAR(auc, JsonNumber(summary, "test_auc"), 1e-4) << summary;

  // A line with its label left in has a field too many: refused, naming
  // the line.
  proto::PredictRequest labelled;
  labelled.add_line(lines[0]);
  labelled.add_line("1\t" + lines[1]);
  proto::PredictResponse refused;
  grpc::ClientContext context;
  const grpc::Status status = stub->Predict(&context, labelled, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("line 1"), std::string::npos)
      << status.error_message();

  // Overload: one thread and one waiting place. Of 24 Predicts sent at
  // once, those past the bound are refused at once naming the flag; the
  // others are answered; none hangs.
  std::vector<std::string> small = args;
  small.push_back("--predict_threads=1");
  small.push_back("--max_waiting_predictions=1");
  ASSERT_OK_AND_ASSIGN(auto bounded, ServerProcess::Start(kPredictor, small));
  auto bounded_stub = proto::Predictor::NewStub(grpc::CreateChannel(
      bounded->address(), grpc::InsecureChannelCredentials()));
  proto::PredictRequest big;
  for (size_t i = 0; i < 2000; ++i) big.add_line(lines[i]);
  std::vector<grpc::Status> answers(24);
  std::vector<std::thread> senders;
  for (size_t i = 0; i < answers.size(); ++i) {
    senders.emplace_back([&, i] {
      proto::PredictResponse response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
      answers[i] = bounded_stub->Predict(&context, big, &response);
    });
  }
  for (std::thread& sender : senders) sender.join();
  int answered = 0, turned_away = 0;
  for (const grpc::Status& answer : answers) {
    if (answer.ok()) {
      ++answered;
    } else {
      EXPECT_EQ(answer.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
          << answer.error_message();
      EXPECT_NE(answer.error_message().find("--max_waiting_predictions"),
                std::string::npos)
          << answer.error_message();
      ++turned_away;
    }
  }
  std::printf(
      "24 Predicts at once, 1 thread, 1 waiting: %d answered, %d "
      "refused\n",
      answered, turned_away);
  EXPECT_GE(answered, 1);
  EXPECT_GE(turned_away, 1);
}

// The input layout of the model a job wrote to `out` (its output_dir).
dense::InputLayout OutputLayout(const std::string& out,
                                const std::string& summary) {
  const std::string path = out + "/dense.params";
  absl::StatusOr<dense::InputLayout> layout =
      dense::ReadInputLayout(ReadFile(path), path);
  EXPECT_OK(layout.status()) << summary;
  return layout.ok() ? *layout : dense::InputLayout();
}

// A job resumed on other data (the next day's files: here the real
// column scaled by 10) keeps the STANDARDIZE statistics its model was
// trained with: the model it writes records the checkpoint's, not those
// of the files it now reads.
TEST(SchemaTrainingTest, AResumedJobKeepsTheStatisticsItWasTrainedWith) {
  const std::string& data = Data();
  const std::string checkpoints = TestTempPath("resume_checkpoints");
  const std::string out = TestTempPath("resume_out");
  const std::string first =
      Train(data, 1, 1,
            {"--checkpoint_dir=" + checkpoints,
             "--checkpoint_every_steps=100000", "--max_steps=20"},
            nullptr, out);
  const dense::InputLayout trained = OutputLayout(out, first);
  ASSERT_EQ(trained.standardized_size(), 1) << first;
  EXPECT_EQ(trained.standardized(0).column(), "r0");
  EXPECT_NE(trained.standardized(0).mean(), 0);

  // The same rows with r0 × 10.
  const std::string scaled = TestTempPath("scaled_train.tsv");
  {
    std::ifstream in(data + "/train.tsv");
    std::ofstream out(scaled);
    std::string line;
    std::getline(in, line);
    out << line << "\n";
    const std::vector<std::string> header = absl::StrSplit(line, '\t');
    const size_t r0 =
        std::find(header.begin(), header.end(), "r0") - header.begin();
    ASSERT_LT(r0, header.size());
    while (std::getline(in, line)) {
      std::vector<std::string> fields = absl::StrSplit(line, '\t');
      double value = 0;
      if (absl::SimpleAtod(fields[r0], &value)) {
        fields[r0] = absl::StrCat(value * 10);
      }
      out << absl::StrJoin(fields, "\t") << "\n";
    }
  }
  const std::string resumed =
      Train(data, 1, 1,
            {"--train_data=" + scaled, "--restore=" + checkpoints,
             "--checkpoint_dir=" + checkpoints, "--max_steps=40"},
            nullptr, out);
  EXPECT_EQ(JsonNumber(resumed, "steps"), 40) << resumed;
  const dense::InputLayout kept = OutputLayout(out, resumed);
  EXPECT_EQ(kept.SerializeAsString(), trained.SerializeAsString())
      << kept.DebugString() << " against " << trained.DebugString();
}

}  // namespace
}  // namespace embedps::testing
