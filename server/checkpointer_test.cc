// ShardCheckpointer in one process: Save while another thread pushes, the
// background writer, AwaitSave, and Restore into a new registry (exact
// digest). The multi-process behaviour is in tests/checkpoint_test.
#include "server/checkpointer.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "checkpoint/manifest.h"
#include "common/process_memory.h"
#include "common/status_matchers.h"
#include "embedding/table_digest.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;

// DigestTable of the checked-in format-2 checkpoint's table.
constexpr uint64_t kFormat2Digest = 12638877911735199868u;

proto::TableConfig Config() {
  proto::TableConfig config;
  config.set_name("t/1");
  config.set_dim(4);
  // TakeSnapshot holds every stripe's lock at once; TSAN's deadlock
  // detector tracks at most 64 locks held by one thread.
  config.set_num_stripes(16);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  return config;
}

void Push(embedding::Table& table, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> keys(500);
  for (uint64_t& k : keys) k = rng() % 5000;
  std::vector<float> grads(keys.size() * 4, 0.5f);
  ASSERT_OK(table.Push(keys, grads));
}

TEST(ShardCheckpointerTest, SavesWhilePushingAndRestoresExactly) {
  const std::string root = ::testing::TempDir() + "/checkpointer";
  std::filesystem::remove_all(root);
  const std::string dir = root + "/ckpt-000000000001.tmp";
  std::filesystem::create_directories(dir);

  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto created, registry.Create(Config()));
  ASSERT_OK_AND_ASSIGN(auto entry, registry.Find(created.table_id));
  for (int i = 0; i < 20; ++i) Push(*entry.table, i);
  ShardCheckpointer checkpointer(0, 1, &registry);

  // Pushes keep coming while the files are written.
  std::atomic<bool> pushing{true};
  proto::SaveRequest request;
  request.set_directory(dir);
  request.set_name("ckpt-000000000001");
  request.set_step(1);
  ASSERT_OK_AND_ASSIGN(const auto at_save,
                       embedding::DigestTable(*entry.table));
  ASSERT_OK_AND_ASSIGN(const double pause, checkpointer.Save(request));
  EXPECT_GE(pause, 0.0);
  std::thread pusher([&] {
    uint64_t seed = 100;
    while (pushing.load()) Push(*entry.table, seed++);
  });
  ASSERT_OK_AND_ASSIGN(const proto::AwaitSaveResponse saved,
                       checkpointer.AwaitSave("ckpt-000000000001"));
  pushing = false;
  pusher.join();
  EXPECT_THAT(checkpointer.AwaitSave("other").status(),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_EQ(saved.file_size(), 1);
  EXPECT_EQ(saved.file(0).file().path(), "shard-00000-of-00001/t-t%2F1.sst");

  // The manifest, as the client writes it.
  proto::CheckpointManifest manifest;
  manifest.set_format_version(checkpoint::kFormatVersion);
  manifest.set_step(1);
  manifest.set_name("ckpt-000000000001");
  manifest.set_num_shards(1);
  proto::CheckpointTable* table = manifest.add_table();
  *table->mutable_config() = *entry.config;
  *table->add_file() = saved.file(0).file();
  ASSERT_OK(checkpoint::WriteManifest(dir, manifest));
  std::filesystem::rename(dir, root + "/ckpt-000000000001");

  TableRegistry restored_registry;
  ShardCheckpointer restorer(0, 1, &restored_registry);
  ASSERT_OK_AND_ASSIGN(const proto::LoadResponse loaded,
                       restorer.Restore(root));
  EXPECT_EQ(loaded.step(), 1u);
  ASSERT_OK_AND_ASSIGN(auto restored, restored_registry.FindByName("t/1"));
  ASSERT_OK_AND_ASSIGN(const auto digest,
                       embedding::DigestTable(*restored.table));
  EXPECT_EQ(digest.rows, at_save.rows);
  EXPECT_EQ(digest.digest, at_save.digest);
  // A second restore finds the table full.
  EXPECT_THAT(restorer.Restore(root).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Writes a one-shard checkpoint of step `step` through `checkpointer` under
// `root`, as a client does: Save, AwaitSave, the MANIFEST, the rename.
void WriteCheckpointThrough(ShardCheckpointer& checkpointer,
                            TableRegistry& registry, const std::string& root,
                            uint64_t step) {
  const std::string name = checkpoint::CheckpointName(step);
  const std::string dir = root + "/" + name + ".tmp";
  std::filesystem::create_directories(dir);
  proto::SaveRequest request;
  request.set_directory(dir);
  request.set_name(name);
  request.set_step(step);
  ASSERT_OK(checkpointer.Save(request).status());
  ASSERT_OK_AND_ASSIGN(const proto::AwaitSaveResponse saved,
                       checkpointer.AwaitSave(name));
  proto::CheckpointManifest manifest;
  manifest.set_format_version(checkpoint::kFormatVersion);
  manifest.set_step(step);
  manifest.set_name(name);
  manifest.set_num_shards(1);
  for (const TableRegistry::Entry& entry : registry.List()) {
    proto::CheckpointTable* table = manifest.add_table();
    *table->mutable_config() = *entry.config;
    for (const auto& file : saved.file()) {
      if (file.table() == entry.config->name()) {
        *table->add_file() = file.file();
      }
    }
  }
  ASSERT_OK(checkpoint::WriteManifest(dir, manifest));
  std::filesystem::rename(dir, root + "/" + name);
}

// Writes a one-shard checkpoint of `registry` under `root` (emptied).
void WriteCheckpoint(TableRegistry& registry, const std::string& root) {
  std::filesystem::remove_all(root);
  ShardCheckpointer checkpointer(0, 1, &registry);
  WriteCheckpointThrough(checkpointer, registry, root, 1);
}

// ps_server --keep_checkpoints: shard 0 prunes the root after writing its
// files of each checkpoint, so the root holds the kept ones and the one
// just written; another shard never prunes.
TEST(ShardCheckpointerTest, ShardZeroKeepsTheNewestCheckpoints) {
  const std::string root = ::testing::TempDir() + "/checkpointer_keep";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  TableRegistry registry;
  ASSERT_OK(registry.Create(Config()).status());
  ShardCheckpointer checkpointer(0, 1, &registry, "", nullptr,
                                 /*keep_checkpoints=*/2);
  for (uint64_t step = 1; step <= 5; ++step) {
    WriteCheckpointThrough(checkpointer, registry, root, step);
  }
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_THAT(names, ElementsAre(checkpoint::CheckpointName(3),
                                 checkpoint::CheckpointName(4),
                                 checkpoint::CheckpointName(5)));

  ShardCheckpointer other_shard(1, 2, &registry, "", nullptr, 1);
  proto::SaveRequest request;
  const std::string dir = root + "/" + checkpoint::CheckpointName(6) + ".tmp";
  std::filesystem::create_directories(dir);
  request.set_directory(dir);
  request.set_name(checkpoint::CheckpointName(6));
  request.set_step(6);
  ASSERT_OK(other_shard.Save(request).status());
  ASSERT_OK(other_shard.AwaitSave(checkpoint::CheckpointName(6)).status());
  EXPECT_TRUE(
      std::filesystem::exists(root + "/" + checkpoint::CheckpointName(3)));
}

// What a job asks before it trains: could this shard save there? Nothing
// is snapshotted or written either way.
TEST(ShardCheckpointerTest, ACheckOnlySaveChecksTheDirectoryAndWritesNothing) {
  const std::string root = ::testing::TempDir() + "/checkpointer_check";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/job");
  TableRegistry registry;
  ASSERT_OK(registry.Create(Config()).status());
  ShardCheckpointer checkpointer(0, 1, &registry, root);
  ASSERT_OK(checkpointer.AcceptsRequests());
  proto::SaveRequest request;
  request.set_check_only(true);
  request.set_directory(root + "/job");
  EXPECT_OK(checkpointer.Save(request).status());
  EXPECT_TRUE(std::filesystem::is_empty(root + "/job"));
  EXPECT_THAT(checkpointer.AwaitSave(""),
              StatusIs(absl::StatusCode::kNotFound));
  request.set_directory(root + "/missing");
  EXPECT_THAT(checkpointer.Save(request),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::HasSubstr("does not exist on shard 0")));
  request.set_directory(::testing::TempDir());
  EXPECT_THAT(checkpointer.Save(request),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       ::testing::HasSubstr("outside the checkpoint root")));
  request.set_directory("");
  EXPECT_THAT(checkpointer.Save(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A real Save still needs its name.
  request.set_check_only(false);
  request.set_directory(root + "/job");
  EXPECT_THAT(checkpointer.Save(request),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("checkpoint name")));
  EXPECT_TRUE(std::filesystem::is_empty(root + "/job"));
}

// A checkpoint whose rows do not fit the memory limit is refused before
// any table is made; with room for them it restores.
TEST(ShardCheckpointerTest,
     ARestorePastTheMemoryLimitIsRefusedAndMakesNothing) {
  const std::string root = ::testing::TempDir() + "/checkpointer_limit";
  proto::TableConfig config;
  config.set_name("big");
  config.set_dim(32);
  config.set_num_stripes(16);  // as Config(): TSAN's lock limit
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::ADAGRAD);
  {
    TableRegistry registry;
    ASSERT_OK_AND_ASSIGN(auto created, registry.Create(config));
    ASSERT_OK_AND_ASSIGN(auto entry, registry.Find(created.table_id));
    std::vector<uint64_t> keys(100000);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919;
    std::vector<float> rows(keys.size() * 32);
    ASSERT_OK(entry.table->Pull(keys, absl::MakeSpan(rows)));
    WriteCheckpoint(registry, root);
  }
  // 100k rows of 32 values and 32 accumulators: ~26 MB; 4 MB of room.
  TableRegistry refused_registry;
  MemoryGuard little_room(ResidentBytes() + (uint64_t{4} << 20));
  ShardCheckpointer tight(0, 1, &refused_registry, "", &little_room);
  EXPECT_THAT(
      tight.Restore(root).status(),
      StatusIs(absl::StatusCode::kResourceExhausted,
               ::testing::AllOf(::testing::HasSubstr("--memory_limit_mb"),
                                ::testing::HasSubstr("100000 rows"))));
  EXPECT_TRUE(refused_registry.List().empty()) << "no table was made";

  TableRegistry restored_registry;
  MemoryGuard room(ResidentBytes() + (uint64_t{512} << 20));
  ShardCheckpointer roomy(0, 1, &restored_registry, "", &room);
  ASSERT_OK_AND_ASSIGN(const proto::LoadResponse loaded, roomy.Restore(root));
  EXPECT_EQ(loaded.rows(), 100000u);
}

// A checkpoint of two tables whose second file is corrupt: the restore
// fails naming it and leaves the shard as it was (the first table neither
// restored nor made; an empty table of that name created before keeps its
// id and stays empty); the intact checkpoint then restores into the same
// shard, under that id.
TEST(ShardCheckpointerTest, AFailedRestoreLeavesTheShardAsItWas) {
  const std::string root = ::testing::TempDir() + "/checkpointer_all";
  proto::TableConfig a = Config(), b = Config();
  a.set_name("a");
  b.set_name("b");
  {
    TableRegistry registry;
    for (const proto::TableConfig& config : {a, b}) {
      ASSERT_OK_AND_ASSIGN(auto created, registry.Create(config));
      ASSERT_OK_AND_ASSIGN(auto entry, registry.Find(created.table_id));
      for (int i = 0; i < 5; ++i) Push(*entry.table, i);
    }
    WriteCheckpoint(registry, root);
  }
  const std::string file_b =
      root + "/ckpt-000000000001/shard-00000-of-00001/t-b.sst";
  const std::string intact = file_b + ".intact";
  std::filesystem::copy_file(file_b, intact);
  {
    // One byte changed in the middle of b's file.
    std::fstream f(file_b, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(
        static_cast<std::streamoff>(std::filesystem::file_size(file_b) / 2));
    f.put('\x5a');
  }

  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto before, registry.Create(a));  // empty, id 0
  ShardCheckpointer checkpointer(0, 1, &registry);
  EXPECT_THAT(
      checkpointer.Restore(root).status(),
      StatusIs(absl::StatusCode::kDataLoss, ::testing::HasSubstr("t-b.sst")));
  ASSERT_EQ(registry.List().size(), 1u) << "b was not made";
  ASSERT_OK_AND_ASSIGN(auto still, registry.FindByName("a"));
  EXPECT_EQ(still.table_id, before.table_id);
  EXPECT_EQ(still.table->Stats().rows, 0u) << "a was not restored";

  std::filesystem::rename(intact, file_b);
  ASSERT_OK_AND_ASSIGN(const proto::LoadResponse loaded,
                       checkpointer.Restore(root));
  EXPECT_GT(loaded.rows(), 0u);
  ASSERT_OK_AND_ASSIGN(auto restored_a, registry.FindByName("a"));
  EXPECT_EQ(restored_a.table_id, before.table_id) << "restored under its id";
  EXPECT_GT(restored_a.table->Stats().rows, 0u);
  ASSERT_OK_AND_ASSIGN(auto restored_b, registry.FindByName("b"));
  EXPECT_GT(restored_b.table->Stats().rows, 0u);
}

// The checked-in checkpoint of format version 2 (checkpoint/testdata):
// every later build must restore it, into any shard count, to the same
// rows.
class CheckedInCheckpointTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(
    Formats, CheckedInCheckpointTest,
    ::testing::Values("checkpoint/testdata/ckpt-000000000007",
                      "checkpoint/testdata/format1/ckpt-000000000007"),
    [](const ::testing::TestParamInfo<std::string>& info) {
      return info.param.find("format1") != std::string::npos ? "Version1"
                                                             : "Version2";
    });

// Every format version this build reads restores the checked-in checkpoint
// into 1 and 3 shards to the same rows.
TEST_P(CheckedInCheckpointTest, RestoresToTheSameRows) {
  const std::string fixture = GetParam();
  uint64_t rows = 0, digest = 0;
  for (int32_t shard = 0; shard < 3; ++shard) {
    TableRegistry registry;
    ShardCheckpointer checkpointer(shard, 3, &registry);
    ASSERT_OK_AND_ASSIGN(const proto::LoadResponse loaded,
                         checkpointer.Restore(fixture));
    EXPECT_EQ(loaded.step(), 7u);
    ASSERT_OK_AND_ASSIGN(auto table, registry.FindByName("users.emb"));
    EXPECT_EQ(table.table->spec().dim, 4);
    ASSERT_OK_AND_ASSIGN(const auto d, embedding::DigestTable(*table.table));
    rows += d.rows;
    digest += d.digest;
  }
  TableRegistry whole;
  ShardCheckpointer one(0, 1, &whole);
  ASSERT_OK(one.Restore(fixture).status());
  ASSERT_OK_AND_ASSIGN(auto table, whole.FindByName("users.emb"));
  ASSERT_OK_AND_ASSIGN(const auto d, embedding::DigestTable(*table.table));
  EXPECT_EQ(d.rows, 60u);
  EXPECT_EQ(rows, d.rows) << "three shards hold every row once";
  EXPECT_EQ(digest, d.digest);
  EXPECT_EQ(d.digest, kFormat2Digest) << "digest " << d.digest;
}

// A version-1 table file is checked against its CRC-32: one byte changed
// is DATA_LOSS naming the file, and nothing is restored.
TEST(ShardCheckpointerTest, AVersion1FileIsCheckedAgainstItsCrc32) {
  const std::string copy = ::testing::TempDir() + "/format1_copy";
  std::filesystem::remove_all(copy);
  std::filesystem::copy("checkpoint/testdata/format1/ckpt-000000000007", copy,
                        std::filesystem::copy_options::recursive);
  const std::string file = copy + "/shard-00000-of-00001/t-users.emb.sst";
  std::filesystem::permissions(file, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(200);
    char byte = 0;
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x01);
    f.seekp(200);
    f.write(&byte, 1);
  }
  TableRegistry registry;
  ShardCheckpointer checkpointer(0, 1, &registry);
  EXPECT_THAT(checkpointer.Restore(copy).status(),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(::testing::HasSubstr("CRC-32"),
                                        ::testing::HasSubstr("t-users.emb"))));
  EXPECT_TRUE(registry.List().empty());
}

}  // namespace
}  // namespace embedps::server
