// End-to-end training on columns that are not Criteo's: schema_datagen
// writes a planted data set with counts, a real, ids, lists and a weighted
// list; a real ps_server holds the embeddings and real ps_worker
// processes train deploy/local/schema_small.txtpb's schema on it.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"
#include "testing/child_process.h"
#include "testing/job_output.h"
#include "testing/server_process.h"

namespace embedps::testing {
namespace {

constexpr char kServer[] = "server/ps_server";
constexpr char kWorker[] = "worker/ps_worker";
constexpr char kConfig[] = "deploy/local/schema_small.txtpb";

// Trains `workers` ranks against `servers` shards; rank 0's summary.
std::string Train(const std::string& data, int servers, int workers) {
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
  const std::string out = TestTempPath("out");
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < workers; ++r) {
    auto rank = ChildProcess::Spawn(
        kWorker,
        {std::string("--config=") + kConfig,
         "--servers=" + absl::StrJoin(addresses, ","),
         absl::StrCat("--rank=", r), absl::StrCat("--world_size=", workers),
         "--train_data=" + data + "/train.tsv",
         "--test_data=" + data + "/test.tsv",
         "--bayes_metrics=" + data + "/meta.json", "--output_dir=" + out,
         "--log_level=warn"});
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
  return ReadFile(out + "/summary.json");
}

// One epoch over 200k samples: the test AUC comes near the planted
// model's Bayes-optimal AUC, with one worker and with two.
TEST(SchemaTrainingTest, TrainsListsAndWeightsToNearTheTruth) {
  const std::string data = TestTempPath("schema_data");
  auto datagen = ChildProcess::Spawn(
      "tools/schema_datagen", {"--output_dir=" + data, "--train_rows=200000",
                               "--test_rows=20000", "--vocab=20,50,100"});
  ASSERT_OK(datagen.status());
  ASSERT_EQ((*datagen)->Wait(), 0);
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

}  // namespace
}  // namespace embedps::testing
