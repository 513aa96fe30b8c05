// PruneCheckpoints: keeps the newest N and the chains they build on,
// deletes the rest, and leaves every kept checkpoint restorable when it is
// stopped after any one of its removals (as a crash would), the next prune
// finishing the work.
#include "checkpoint/retention.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "checkpoint/format.h"
#include "checkpoint/manifest.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::checkpoint {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

// A checkpoint of `step` under `root` with one table file; `parent`: the
// checkpoint its (incremental) file builds on, empty for a full one.
void Write(const std::string& root, uint64_t step, uint64_t parent_step) {
  const std::string name = CheckpointName(step);
  const std::string dir = root + "/" + name;
  std::filesystem::create_directories(dir + "/shard-00000-of-00001");
  std::ofstream(dir + "/shard-00000-of-00001/t-emb.sst") << "rows";
  proto::CheckpointManifest manifest;
  manifest.set_format_version(kFormatVersion);
  manifest.set_step(step);
  manifest.set_name(name);
  manifest.set_num_shards(1);
  proto::CheckpointShardFile* file = manifest.add_table()->add_file();
  file->set_path("shard-00000-of-00001/t-emb.sst");
  file->set_incremental(parent_step != 0);
  if (parent_step != 0) manifest.set_parent(CheckpointName(parent_step));
  ASSERT_OK(WriteManifest(dir, manifest));
}

std::vector<std::string> Names(const std::string& root) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Full checkpoints at 10 and 40; 20, 30 build on 10 (a chain), 50 on 40.
std::string Root(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(root);
  Write(root, 10, 0);
  Write(root, 20, 10);
  Write(root, 30, 20);
  Write(root, 40, 0);
  Write(root, 50, 40);
  std::filesystem::create_directories(root + "/" + CheckpointName(60) +
                                      kTemporarySuffix);  // being written
  std::filesystem::create_directories(root + "/ckpt-operators-copy");
  return root;
}

TEST(PruneCheckpointsTest, KeepsTheNewestAndWhatTheirChainsNeed) {
  const std::string root = Root("prune_keep");
  ASSERT_OK_AND_ASSIGN(PruneResult pruned, PruneCheckpoints(root, 2));
  EXPECT_THAT(pruned.kept, ElementsAre(CheckpointName(50), CheckpointName(40)));
  EXPECT_THAT(pruned.deleted,
              UnorderedElementsAre(CheckpointName(10), CheckpointName(20),
                                   CheckpointName(30)));
  EXPECT_THAT(Names(root), ElementsAre(CheckpointName(40), CheckpointName(50),
                                       CheckpointName(60) + kTemporarySuffix,
                                       "ckpt-operators-copy"));
  // Keeping 3 keeps 30, hence its whole chain down to 10.
  const std::string chained = Root("prune_chain");
  ASSERT_OK_AND_ASSIGN(pruned, PruneCheckpoints(chained, 3));
  EXPECT_TRUE(pruned.deleted.empty());
  ASSERT_OK_AND_ASSIGN(pruned, PruneCheckpoints(chained, 1));
  EXPECT_THAT(pruned.kept, ElementsAre(CheckpointName(50)));
  EXPECT_EQ(ResolveCheckpoint(chained).value(),
            chained + "/" + CheckpointName(50));
  ASSERT_OK(ReadChain(chained + "/" + CheckpointName(50)).status());
  EXPECT_THAT(PruneCheckpoints(chained, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PruneCheckpointsTest, AStopAfterAnyRemovalLeavesEveryKeptOneRestorable) {
  for (int stop_after = 1; stop_after <= 6; ++stop_after) {
    const std::string root = Root("prune_stop_" + std::to_string(stop_after));
    int removals = 0;
    ASSERT_OK(PruneCheckpoints(root, 2, [&] {
                return ++removals < stop_after;
              }).status());
    for (uint64_t step : {40, 50}) {
      EXPECT_OK(ReadChain(root + "/" + CheckpointName(step)).status())
          << "stopped after " << stop_after;
    }
    ASSERT_OK_AND_ASSIGN(const std::string newest, ResolveCheckpoint(root));
    EXPECT_EQ(newest, root + "/" + CheckpointName(50));
    // The next prune finishes what the stopped one began.
    ASSERT_OK(PruneCheckpoints(root, 2).status());
    EXPECT_THAT(Names(root), ElementsAre(CheckpointName(40), CheckpointName(50),
                                         CheckpointName(60) + kTemporarySuffix,
                                         "ckpt-operators-copy"))
        << "stopped after " << stop_after;
  }
}

}  // namespace
}  // namespace embedps::checkpoint
