#include "worker/job_data.h"

#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "data/feature_schema.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::worker {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// What a job checks of its test files before it trains.
TEST(JobDataTest, TestFilesThatCannotBeReadAreNamedBeforeTraining) {
  const std::string good = Write("good.tsv", "label\tuser\n1\tu1\n");
  EXPECT_OK(JobData::CheckReadable({good}, std::nullopt));
  EXPECT_OK(JobData::CheckReadable({}, std::nullopt));
  EXPECT_THAT(JobData::CheckReadable({good, ::testing::TempDir() + "/typo.tsv"},
                                     std::nullopt),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("typo.tsv")));
  EXPECT_THAT(JobData::CheckReadable({Write("a.bz2", "BZh91AY")}, std::nullopt),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bzip2")));
  // Named .gz, gzip's magic, then no stream: damaged from its first bytes.
  EXPECT_THAT(
      JobData::CheckReadable(
          {Write("cut.gz", std::string("\x1f\x8b\x08\x00", 4))}, std::nullopt),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("malformed file")));

  data::FeatureSchemaSpec spec;
  spec.header = true;
  spec.label = "label";
  spec.sparse = {{"user"}};
  ASSERT_OK_AND_ASSIGN(const data::FeatureSchema schema,
                       data::ResolveFeatureSchema(spec, "label\tuser"));
  EXPECT_OK(JobData::CheckReadable({good}, schema));
  EXPECT_THAT(
      JobData::CheckReadable({Write("other.tsv", "label\titem\n")}, schema),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("is not the schema's")));
}

}  // namespace
}  // namespace embedps::worker
