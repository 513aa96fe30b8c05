#include "common/text_proto.h"

#include <fstream>
#include <string>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/tables.pb.h"

namespace embedps {
namespace {

using ::testing::HasSubstr;

TEST(TextProtoTest, ParsesAMessage) {
  proto::TableConfig config;
  config.set_dim(3);
  ASSERT_OK(ParseTextProto("name: \"t\" dim: 8", "config", &config));
  EXPECT_EQ(config.name(), "t");
  EXPECT_EQ(config.dim(), 8) << "cleared, then parsed";
}

TEST(TextProtoTest, NamesWhatAndWhereTheErrorIs) {
  proto::TableConfig config;
  const absl::Status status =
      ParseTextProto("name: \"t\"\n  dimm: 8", "--tables file 'x'", &config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--tables file 'x'"));
  EXPECT_THAT(status.message(), HasSubstr("embedps.proto.TableConfig"));
  EXPECT_THAT(status.message(), HasSubstr("line 2, column")) << status;
  EXPECT_THAT(status.message(), HasSubstr("dimm"));
}

TEST(TextProtoTest, ReadsAFileAndNamesAMissingOne) {
  const std::string path =
      std::string(::testing::TempDir()) + "/text_proto_test.txtpb";
  std::ofstream(path) << "name: \"u\"\n";
  proto::TableConfig config;
  ASSERT_OK(ReadTextProtoFile(path, "the config", &config));
  EXPECT_EQ(config.name(), "u");

  const absl::Status missing =
      ReadTextProtoFile(path + ".missing", "--config x", &config);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("--config x"));
  EXPECT_FALSE(
      ReadTextProtoFile(::testing::TempDir(), "a directory", &config).ok());
}

}  // namespace
}  // namespace embedps
