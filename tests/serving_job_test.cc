// Serving beside a real training job: datagen writes a planted data set; a
// real ps_server shard trains with a real ps_worker (checkpoints and
// publications every 2 s, deploy/local/dlrm_small.txtpb); two serving
// replicas (ps_server --role=serving) follow it from its first checkpoint;
// ps_predictor serves Predict over them. The job runs once for the suite;
// the tests then read what the replicas ended with, in order (the last
// one kills and restarts a replica).
#include <signal.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "client/serving_client.h"
#include "common/status_matchers.h"
#include "config/dlrm_config.h"
#include "config/worker_config.pb.h"
#include "data/criteo_reader.h"
#include "dense/eval_metrics.h"
#include "dense/model.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/serving.grpc.pb.h"
#include "proto/tables.pb.h"
#include "testing/child_process.h"
#include "testing/job_output.h"
#include "testing/planted_data.h"
#include "testing/server_process.h"

namespace embedps::testing {
namespace {

constexpr char kServer[] = "server/ps_server";
constexpr char kWorker[] = "worker/ps_worker";
constexpr char kPredictor[] = "worker/ps_predictor";
constexpr char kConfig[] = "deploy/local/dlrm_small.txtpb";

// Label-less lines and their labels.
struct Lines {
  std::vector<std::string> features;
  std::vector<float> labels;
};

Lines ReadLines(const std::string& path, size_t limit) {
  Lines lines;
  std::ifstream in(path);
  std::string line;
  while (lines.features.size() < limit && std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    lines.labels.push_back(line.substr(0, tab) == "1" ? 1.0f : 0.0f);
    lines.features.push_back(line.substr(tab + 1));
  }
  return lines;
}

data::CriteoBatch Parse(const std::vector<std::string>& lines) {
  data::CriteoBatch batch;
  batch.size = static_cast<int>(lines.size());
  batch.labels.resize(lines.size());
  batch.dense.resize(lines.size() * data::kCriteoDense);
  batch.keys.resize(lines.size() * data::kCriteoSlots);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_OK(data::ParseCriteoFeatures(lines[i].data(), lines[i].size(),
                                        &batch, static_cast<int>(i)));
  }
  return batch;
}

class ServingJobTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_ = new Suite;
    s_->error = s_->Run();
  }
  static void TearDownTestSuite() {
    delete s_;
    s_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(s_->error, "") << s_->error; }

  struct Suite {
    std::string error;  // why the job could not run; "" when it did
    std::string data, checkpoints, out;
    config::WorkerConfig config;
    std::unique_ptr<ServerProcess> training;
    std::unique_ptr<ServerProcess> replicas[2];
    std::string summary;
    int64_t final_step = 0;
    std::set<uint64_t> steps_while_training;  // versions seen served
    std::vector<uint64_t> keys;               // every key of the data

    // The job's table as ps_worker creates it (mode async, its default
    // step timeout): CreateTable of it is the handle of the existing one.
    proto::TableConfig Table() const {
      proto::TableConfig table = config.table(0);
      table.mutable_consistency()->set_mode(proto::ConsistencyConfig::ASYNC);
      table.mutable_consistency()->set_timeout_ms(300'000);
      return table;
    }

    std::unique_ptr<ServerProcess> StartReplica() {
      auto replica = ServerProcess::Start(
          kServer,
          {"--role=serving", "--follow_checkpoints=" + checkpoints,
           "--training_servers=" + training->address(),
           "--checkpoint_poll=200ms", "--log_level=warn"},
          absl::Seconds(120));
      EXPECT_OK(replica.status());
      return replica.ok() ? *std::move(replica) : nullptr;
    }

    client::ServingClientOptions Serving(std::vector<int> which) const {
      client::ServingClientOptions options;
      options.replicas.emplace_back();
      for (int r : which) {
        options.replicas[0].push_back(replicas[r]->address());
      }
      options.deadline = absl::Seconds(10);
      options.attempt_timeout = absl::Seconds(2);
      options.down_for = absl::Milliseconds(200);
      return options;
    }

    // Every key's served row (NONE) at `version` (0: latest).
    std::vector<float> Served(client::ServingClient& client,
                              uint64_t version = 0) const {
      std::vector<client::ServingSlot> slot = {{config.table(0).name(),
                                                config.embedding_dim(),
                                                keys,
                                                {},
                                                proto::POOLING_NONE}};
      std::vector<std::vector<float>> out;
      EXPECT_OK(client.Lookup(slot, &out, version));
      return out.empty() ? std::vector<float>() : out[0];
    }

    // Every key's row on the training-role server at `address`.
    std::vector<float> Trained(const std::string& address) const {
      client::ClientOptions options;
      options.servers = {address};
      auto trainer = client::Client::Connect(options);
      EXPECT_OK(trainer.status());
      if (!trainer.ok()) return {};
      auto table = (*trainer)->CreateTable(Table());
      EXPECT_OK(table.status());
      if (!table.ok()) return {};
      std::vector<float> rows(keys.size() * config.embedding_dim());
      EXPECT_OK((*trainer)->Lookup(*table, keys, absl::MakeSpan(rows)));
      return rows;
    }

    // Waits until every replica in `which` serves `step` or later.
    bool AwaitStep(uint64_t step, std::vector<int> which) const {
      auto client = client::ServingClient::Connect(Serving(which));
      if (!client.ok()) return false;
      const absl::Time deadline = absl::Now() + absl::Seconds(60);
      while (absl::Now() < deadline) {
        bool all = true;
        const auto versions = (*client)->Versions();
        for (const auto& v : versions[0]) all &= v.step() >= step;
        if (all) return true;
        absl::SleepFor(absl::Milliseconds(50));
      }
      return false;
    }

    // Trains once, with the replicas following; "" or what went wrong.
    std::string Run() {
      data = TestTempPath("data");
      checkpoints = TestTempPath("checkpoints");
      out = TestTempPath("out");
      {
        std::ifstream in(kConfig);
        std::stringstream text;
        text << in.rdbuf();
        if (!google::protobuf::TextFormat::ParseFromString(text.str(),
                                                           &config)) {
          return "cannot read the config";
        }
      }
      // Publications every 0.2 s (the config's 2 s can outlast the job on
      // a quiet machine): several come between checkpoints.
      config.set_publish_every_seconds(0.2);
      const std::string job_config = TestTempPath("job.txtpb");
      {
        std::string text;
        google::protobuf::TextFormat::PrintToString(config, &text);
        std::ofstream(job_config) << text;
      }
      if (absl::Status generated = WritePlantedData(data, 150000, 5000);
          !generated.ok()) {
        return generated.ToString();
      }
      {
        const Lines train = ReadLines(data + "/train.txt", SIZE_MAX);
        const data::CriteoBatch parsed = Parse(train.features);
        absl::flat_hash_set<uint64_t> distinct(parsed.keys.begin(),
                                               parsed.keys.end());
        keys.assign(distinct.begin(), distinct.end());
      }
      auto shard = ServerProcess::Start(kServer, {"--num_workers=1"});
      if (!shard.ok()) return shard.status().ToString();
      training = *std::move(shard);
      auto job = ChildProcess::Spawn(
          kWorker,
          {"--config=" + job_config, "--servers=" + training->address(),
           "--mode=async", "--train_data=" + data + "/train.txt",
           "--test_data=" + data + "/test.txt", "--output_dir=" + out,
           "--checkpoint_dir=" + checkpoints, "--checkpoint_every_steps=40",
           "--log_level=warn"},
          "", TestTempPath("worker.log"));
      if (!job.ok()) return job.status().ToString();
      // The replicas start once the first checkpoint is written.
      for (auto& replica : replicas) {
        replica = StartReplica();
        if (replica == nullptr) return "a replica did not start";
      }
      auto client = client::ServingClient::Connect(Serving({0, 1}));
      if (!client.ok()) return client.status().ToString();
      int code = -1;
      while (!(*job)->Poll(&code)) {
        const auto versions = (*client)->Versions();
        for (const auto& v : versions[0]) {
          if (v.step() > 0) steps_while_training.insert(v.step());
        }
        absl::SleepFor(absl::Milliseconds(50));
      }
      if (code != 0) {
        return "the job failed: " + ReadFile(TestTempPath("worker.log"));
      }
      summary = ReadFile(out + "/summary.json");
      final_step = static_cast<int64_t>(JsonNumber(summary, "steps"));
      if (JsonNumber(summary, "last_published_step") != final_step) {
        return "the job did not publish its last step: " + summary;
      }
      return "";
    }
  };

  static Suite* s_;
};

ServingJobTest::Suite* ServingJobTest::s_ = nullptr;

TEST_F(ServingJobTest, ReplicasFollowTheJobAndEndEqualToItsLastCheckpoint) {
  // While the job ran, the version served moved on, through publications
  // (every 0.2 s): checkpoints come every 40 steps, so a version of any
  // other step was made by one.
  EXPECT_GE(s_->steps_while_training.size(), 2u)
      << "steps seen: " << absl::StrJoin(s_->steps_while_training, ",");
  EXPECT_TRUE(std::any_of(s_->steps_while_training.begin(),
                          s_->steps_while_training.end(),
                          [](uint64_t step) { return step % 40 != 0; }))
      << "the hot path was not used; steps seen: "
      << absl::StrJoin(s_->steps_while_training, ",");
  ASSERT_TRUE(s_->AwaitStep(s_->final_step, {0, 1}));
  ASSERT_OK_AND_ASSIGN(auto client,
                       client::ServingClient::Connect(s_->Serving({0, 1})));
  const auto versions = client->Versions();
  for (const auto& v : versions[0]) {
    // (The last step may come as its publication or, when the replica polls
    // the root first, as the final checkpoint of the same step.)
    EXPECT_EQ(v.step(), static_cast<uint64_t>(s_->final_step));
    EXPECT_EQ(v.last_error(), "");
  }
  // The job's last checkpoint, restored on a fresh training-role server,
  // holds exactly what every replica serves.
  const std::string last =
      absl::StrFormat("%s/ckpt-%012d", s_->checkpoints, s_->final_step);
  ASSERT_OK_AND_ASSIGN(auto restored,
                       ServerProcess::Start(kServer, {"--restore=" + last}));
  const std::vector<float> expected = s_->Trained(restored->address());
  ASSERT_EQ(expected.size(), s_->keys.size() * s_->config.embedding_dim());
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK_AND_ASSIGN(auto one,
                         client::ServingClient::Connect(s_->Serving({r})));
    const std::vector<float> served = s_->Served(*one, s_->final_step);
    ASSERT_EQ(served.size(), expected.size());
    EXPECT_EQ(std::memcmp(served.data(), expected.data(),
                          expected.size() * sizeof(float)),
              0)
        << "replica " << r;
  }
}

TEST_F(ServingJobTest, PredictEqualsTheWorkersForwardAtTheSameStep) {
  ASSERT_TRUE(s_->AwaitStep(s_->final_step, {0, 1}));
  ASSERT_OK_AND_ASSIGN(
      auto predictor,
      ServerProcess::Start(kPredictor,
                           {std::string("--config=") + kConfig,
                            "--serving=" + s_->replicas[0]->address() + "," +
                                s_->replicas[1]->address(),
                            "--deadline_ms=5000", "--log_level=warn"}));
  const Lines test = ReadLines(s_->data + "/test.txt", 300);
  ASSERT_EQ(test.features.size(), 300u);
  auto stub = proto::Predictor::NewStub(grpc::CreateChannel(
      predictor->address(), grpc::InsecureChannelCredentials()));
  proto::PredictRequest request;
  for (const std::string& line : test.features) request.add_line(line);
  proto::PredictResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub->Predict(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.version(), static_cast<uint64_t>(s_->final_step));
  ASSERT_EQ(response.probability_size(), 300);

  // The worker's model: its final dense parameters and the training
  // shard's rows (the same step: the job has ended), forward on the CPU.
  const data::CriteoBatch parsed = Parse(test.features);
  ASSERT_OK_AND_ASSIGN(auto model,
                       dense::CreateModel(config::ModelSpecOf(s_->config), {}));
  ASSERT_OK_AND_ASSIGN(
      const int64_t step,
      dense::LoadParameters(s_->out + "/dense.params", *model));
  EXPECT_EQ(step, s_->final_step);
  client::ClientOptions options;
  options.servers = {s_->training->address()};
  ASSERT_OK_AND_ASSIGN(auto trainer, client::Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(auto table, trainer->CreateTable(s_->Table()));
  const int dim = s_->config.embedding_dim();
  const int slots = static_cast<int>(config::SlotTables(s_->config).size());
  std::vector<std::vector<float>> rows(slots, std::vector<float>(300 * dim));
  std::vector<int32_t> offsets(301);
  for (int i = 0; i <= 300; ++i) offsets[i] = i;
  dense::Batch<float> batch;
  batch.size = 300;
  batch.dense = parsed.dense;
  batch.labels = test.labels;
  for (int s = 0; s < slots; ++s) {
    std::vector<uint64_t> keys(300);
    for (int i = 0; i < 300; ++i) keys[i] = parsed.keys[i * 26 + s];
    ASSERT_OK(trainer->Lookup(table, keys, absl::MakeSpan(rows[s])));
    batch.slots.push_back({rows[s], offsets});
  }
  std::vector<float> logits(300);
  ASSERT_OK(model->Predict(batch, absl::MakeSpan(logits)));
  for (int i = 0; i < 300; ++i) {
    EXPECT_NEAR(response.probability(i), 1.0 / (1.0 + std::exp(-logits[i])),
                1e-6)
        << "line " << i;
  }

  // Bad input: refused with the line named, nothing predicted.
  for (const std::string& bad :
       {std::string("1\t2\t3"), test.features[0] + "\textra",
        std::string(test.features[0]).replace(0, 1, "x")}) {
    proto::PredictRequest two;
    two.add_line(test.features[1]);
    two.add_line(bad);
    proto::PredictResponse refused;
    grpc::ClientContext bad_context;
    const grpc::Status s = stub->Predict(&bad_context, two, &refused);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(s.error_message().find("line 1"), std::string::npos)
        << s.error_message();
    EXPECT_EQ(refused.probability_size(), 0);
  }
  proto::PredictResponse none;
  grpc::ClientContext empty_context;
  ASSERT_TRUE(
      stub->Predict(&empty_context, proto::PredictRequest(), &none).ok());
  EXPECT_EQ(none.probability_size(), 0);
}

// The job's model served from rows stored as float16 and int8
// (--serving_storage) predicts the test set with the AUC of float32 rows:
// within 0.001 (float16) and 0.003 (int8). Prints the three.
TEST_F(ServingJobTest, PredictAucThroughFloat16AndInt8Storage) {
  ASSERT_TRUE(s_->AwaitStep(s_->final_step, {0, 1}));
  const Lines test = ReadLines(s_->data + "/test.txt", SIZE_MAX);
  ASSERT_GE(test.features.size(), 1000u);
  const auto auc_through = [&](const std::string& replica) -> double {
    auto predictor = ServerProcess::Start(
        kPredictor, {std::string("--config=") + kConfig, "--serving=" + replica,
                     "--deadline_ms=20000", "--log_level=warn"});
    EXPECT_OK(predictor.status());
    if (!predictor.ok()) return 0;
    auto stub = proto::Predictor::NewStub(grpc::CreateChannel(
        (*predictor)->address(), grpc::InsecureChannelCredentials()));
    std::vector<float> scores;
    for (size_t at = 0; at < test.features.size(); at += 500) {
      proto::PredictRequest request;
      for (size_t i = at; i < std::min(at + 500, test.features.size()); ++i) {
        request.add_line(test.features[i]);
      }
      proto::PredictResponse response;
      grpc::ClientContext context;
      const grpc::Status status = stub->Predict(&context, request, &response);
      EXPECT_TRUE(status.ok()) << status.error_message();
      if (!status.ok()) return 0;
      EXPECT_EQ(response.version(), static_cast<uint64_t>(s_->final_step));
      scores.insert(scores.end(), response.probability().begin(),
                    response.probability().end());
    }
    return dense::RocAuc(scores, test.labels);
  };
  const double float32 = auc_through(s_->replicas[0]->address());
  std::vector<double> stored;
  for (const char* storage : {"float16", "int8"}) {
    ASSERT_OK_AND_ASSIGN(
        auto replica,
        ServerProcess::Start(
            kServer,
            {"--role=serving", "--follow_checkpoints=" + s_->checkpoints,
             "--training_servers=" + s_->training->address(),
             std::string("--serving_storage=") + storage,
             "--checkpoint_poll=200ms", "--log_level=warn"},
            absl::Seconds(120)));
    const auto versions = [&] {
      client::ServingClientOptions options;
      options.replicas = {{replica->address()}};
      options.deadline = absl::Seconds(10);
      return client::ServingClient::Connect(options);
    }();
    ASSERT_OK(versions.status());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while ((*versions)->Versions()[0][0].step() <
               static_cast<uint64_t>(s_->final_step) &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(50));
    }
    stored.push_back(auc_through(replica->address()));
  }
  std::printf("Predict test AUC over %zu lines at step %" PRId64
              ": float32 %.5f, float16 %.5f (%+.5f), int8 %.5f (%+.5f)\n",
              test.features.size(), s_->final_step, float32, stored[0],
              stored[0] - float32, stored[1], stored[1] - float32);
  EXPECT_GT(float32, 0.6);  // the job learned something
  EXPECT_NEAR(stored[0], float32, 0.001);
  EXPECT_NEAR(stored[1], float32, 0.003);
}

TEST_F(ServingJobTest, PredictorFlagsAreChecked) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--serving=127.0.0.1:1"},
           {std::string("--config=") + kConfig},
           {"--config=/nonexistent.txtpb", "--serving=127.0.0.1:1"}}) {
    ASSERT_OK_AND_ASSIGN(auto p, ChildProcess::Spawn(kPredictor, args));
    ASSERT_OK_AND_ASSIGN(const int code, p->WaitFor(absl::Seconds(30)));
    EXPECT_EQ(code, 2) << absl::StrJoin(args, " ");
  }
}

TEST_F(ServingJobTest, APublishedRowIsServedFromItsStepAndOlderVersionsStay) {
  ASSERT_TRUE(s_->AwaitStep(s_->final_step, {0, 1}));
  client::ClientOptions options;
  options.servers = {s_->training->address()};
  ASSERT_OK_AND_ASSIGN(auto trainer, client::Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(auto table, trainer->CreateTable(s_->Table()));
  ASSERT_OK_AND_ASSIGN(auto client,
                       client::ServingClient::Connect(s_->Serving({0, 1})));
  const std::vector<float> before = s_->Served(*client, s_->final_step);
  const std::vector<uint64_t> key = {s_->keys[0]};
  ASSERT_OK(trainer->Push(
      table, key, std::vector<float>(s_->config.embedding_dim(), 1.0f)));
  const uint64_t step = s_->final_step + 1;
  ASSERT_OK(trainer->Publish(step, "").status());
  ASSERT_TRUE(s_->AwaitStep(step, {0, 1}));
  std::vector<float> trained(s_->config.embedding_dim());
  ASSERT_OK(trainer->Lookup(table, key, absl::MakeSpan(trained)));
  for (int r = 0; r < 2; ++r) {
    ASSERT_OK_AND_ASSIGN(auto one,
                         client::ServingClient::Connect(s_->Serving({r})));
    std::vector<client::ServingSlot> slot = {{s_->config.table(0).name(),
                                              s_->config.embedding_dim(),
                                              key,
                                              {},
                                              proto::POOLING_NONE}};
    std::vector<std::vector<float>> now;
    ASSERT_OK(one->Lookup(slot, &now, step));
    EXPECT_EQ(now[0], trained) << "replica " << r;
    EXPECT_NE(now[0], std::vector<float>(before.begin(),
                                         before.begin() + trained.size()));
    // The previous version is still answerable, unchanged.
    EXPECT_EQ(s_->Served(*one, s_->final_step), before) << "replica " << r;
  }
}

TEST_F(ServingJobTest, AKilledReplicaFailsOverAndARestartedOneCatchesUp) {
  ASSERT_OK_AND_ASSIGN(auto client,
                       client::ServingClient::Connect(s_->Serving({0, 1})));
  const std::vector<float> before = s_->Served(*client);
  ASSERT_FALSE(before.empty());
  s_->replicas[0]->Signal(SIGKILL);
  s_->replicas[0]->Wait();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(s_->Served(*client), before);
  EXPECT_GE(client->stats().failovers, 1u);

  // Training moves on while the replica is down, then it comes back: from
  // the latest checkpoint plus the publications since, it catches up.
  client::ClientOptions options;
  options.servers = {s_->training->address()};
  ASSERT_OK_AND_ASSIGN(auto trainer, client::Client::Connect(options));
  ASSERT_OK_AND_ASSIGN(auto table, trainer->CreateTable(s_->Table()));
  const std::vector<uint64_t> some(s_->keys.begin(), s_->keys.begin() + 50);
  ASSERT_OK(trainer->Push(
      table, some,
      std::vector<float>(some.size() * s_->config.embedding_dim(), 0.5f)));
  const uint64_t step = s_->final_step + 2;
  ASSERT_OK(trainer->Publish(step, "").status());
  s_->replicas[0] = s_->StartReplica();
  ASSERT_NE(s_->replicas[0], nullptr);
  ASSERT_TRUE(s_->AwaitStep(step, {0, 1}));
  ASSERT_OK_AND_ASSIGN(auto restarted,
                       client::ServingClient::Connect(s_->Serving({0})));
  ASSERT_OK_AND_ASSIGN(auto other,
                       client::ServingClient::Connect(s_->Serving({1})));
  const std::vector<float> caught_up = s_->Served(*restarted, step);
  EXPECT_EQ(caught_up, s_->Served(*other, step));
  EXPECT_EQ(caught_up, s_->Trained(s_->training->address()));
  EXPECT_NE(caught_up, before);
}

}  // namespace
}  // namespace embedps::testing
