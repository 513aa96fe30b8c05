// ResolveCheckpoint's search of a root, AssembleManifest and ReadExtraFile.
#include "checkpoint/manifest.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "common/file_io.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::checkpoint {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

void WriteCheckpointAt(const std::string& dir, uint64_t step) {
  std::filesystem::create_directories(dir);
  proto::CheckpointManifest manifest;
  manifest.set_format_version(kFormatVersion);
  manifest.set_step(step);
  manifest.set_num_shards(1);
  ASSERT_OK(WriteManifest(dir, manifest));
}

TEST(ResolveCheckpointTest, TakesTheHighestStepOfOurOwnNamesOnly) {
  const std::string root = ::testing::TempDir() + "/resolve";
  std::filesystem::remove_all(root);
  WriteCheckpointAt(root + "/ckpt-000000000010", 10);
  WriteCheckpointAt(root + "/ckpt-000000000030", 30);
  // Sorts after every other name, holds a higher step: not of our form.
  WriteCheckpointAt(root + "/ckpt-zz-backup-of-first", 99);
  // An operator's quarantine of the newest.
  WriteCheckpointAt(root + "/ckpt-000000000039.bad", 39);
  // Being written.
  WriteCheckpointAt(root + "/ckpt-000000000045.tmp", 45);
  // The newest by name, its manifest garbage.
  std::filesystem::create_directories(root + "/ckpt-000000000050");
  std::ofstream(root + "/ckpt-000000000050/MANIFEST") << "garbage";
  // A name of our form whose manifest holds an earlier step than its name.
  WriteCheckpointAt(root + "/ckpt-000000000035", 20);

  std::vector<std::string> skipped;
  ASSERT_OK_AND_ASSIGN(const std::string found,
                       ResolveCheckpoint(root, &skipped));
  EXPECT_EQ(found, root + "/ckpt-000000000030");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_THAT(skipped[0], HasSubstr("ckpt-000000000050"));

  EXPECT_TRUE(IsCheckpointName("ckpt-000000000001"));
  EXPECT_FALSE(IsCheckpointName("ckpt-00000000001"));
  EXPECT_FALSE(IsCheckpointName("ckpt-000000000001.tmp"));
  EXPECT_FALSE(IsCheckpointName("ckpt-00000000000x"));
}

TEST(ResolveCheckpointTest, NothingCompleteIsNotFoundAndSaysWhatWasLeftOut) {
  const std::string root = ::testing::TempDir() + "/resolve_none";
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root + "/ckpt-000000000001");
  std::ofstream(root + "/ckpt-000000000001/MANIFEST") << "garbage";
  EXPECT_THAT(
      ResolveCheckpoint(root).status(),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("ckpt-000000000001")));
}

// An extra file reads back as written; one the manifest does not list is
// nullopt; one changed after the manifest was written is DATA_LOSS naming
// it.
TEST(ReadExtraFileTest, ChecksTheFileAgainstItsManifest) {
  const std::string dir = ::testing::TempDir() + "/extra";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/dense.params") << "parameters";
  proto::CheckpointManifest manifest;
  const uint32_t crc = Crc32("parameters");
  proto::CheckpointExtraFile* file = manifest.add_extra_file();
  file->set_path("dense.params");
  file->set_crc32(crc);
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> bytes,
                       ReadExtraFile(dir, manifest, "dense.params"));
  EXPECT_EQ(bytes, std::optional<std::string>("parameters"));
  ASSERT_OK_AND_ASSIGN(bytes, ReadExtraFile(dir, manifest, "other"));
  EXPECT_FALSE(bytes.has_value());
  std::ofstream(dir + "/dense.params") << "parameterz";
  EXPECT_THAT(ReadExtraFile(dir, manifest, "dense.params"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("dense.params")));
}

}  // namespace
}  // namespace embedps::checkpoint
