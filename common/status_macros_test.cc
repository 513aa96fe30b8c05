#include "common/status_macros.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd number");
  return x / 2;
}

absl::Status CheckEven(int x, int* calls) {
  ++*calls;
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return absl::OkStatus();
}

absl::Status TwiceChecked(int x, int* calls) {
  RETURN_IF_ERROR(CheckEven(x, calls));
  RETURN_IF_ERROR(CheckEven(x / 2, calls));
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

TEST(StatusMacrosTest, ReturnIfErrorStopsAtFirstFailureAndEvaluatesOnce) {
  int calls = 0;
  EXPECT_OK(TwiceChecked(4, &calls));
  EXPECT_EQ(calls, 2);
  calls = 0;
  EXPECT_THAT(TwiceChecked(3, &calls),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_THAT(TwiceChecked(6, &calls),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(calls, 2);
}

TEST(StatusMacrosTest, AssignOrReturnPropagatesValueAndError) {
  ASSERT_OK_AND_ASSIGN(int q, Quarter(12));
  EXPECT_EQ(q, 3);
  EXPECT_THAT(Quarter(6), StatusIs(absl::StatusCode::kInvalidArgument,
                                   HasSubstr("odd number")));
}

TEST(StatusMatchersTest, MatchesCodeAndMessage) {
  absl::Status status = absl::NotFoundError("table 'users' not found");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("users")));
  EXPECT_THAT(status,
              Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("items"))));
  EXPECT_THAT(status, Not(StatusIs(absl::StatusCode::kInternal)));
  EXPECT_THAT(status, Not(::embedps::testing::IsOk()));
}

}  // namespace
}  // namespace embedps
