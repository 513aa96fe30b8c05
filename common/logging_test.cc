#include "common/logging.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TEST(LoggingTest, SameComponentGetsTheSameLogger) {
  auto a = Logger("embedding");
  auto b = Logger("embedding");
  auto c = Logger("server");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());
  EXPECT_EQ(a->name(), "embedding");
}

TEST(LoggingTest, LevelsApplyToExistingAndNewLoggers) {
  auto existing = Logger("before");
  ASSERT_OK(SetLogLevel("warn"));
  EXPECT_EQ(existing->level(), spdlog::level::warn);
  EXPECT_EQ(Logger("after")->level(), spdlog::level::warn);
  ASSERT_OK(SetLogLevel("off"));
  EXPECT_EQ(existing->level(), spdlog::level::off);
  ASSERT_OK(SetLogLevel("info"));
}

TEST(LoggingTest, UnknownLevelIsRefusedWithTheChoices) {
  EXPECT_THAT(SetLogLevel("loud"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("trace, debug, info, warn, error, off")));
}

}  // namespace
}  // namespace embedps
