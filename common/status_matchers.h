// gtest matchers for absl::Status and absl::StatusOr<T> (test-only).
//
//   EXPECT_THAT(table->Push(keys, grads),
//               StatusIs(absl::StatusCode::kInvalidArgument,
//               HasSubstr("dim")));
//   EXPECT_OK(status_or_status);
//   ASSERT_OK_AND_ASSIGN(auto table, Table::Create(spec));
//
// Debian's abseil has no absl/status/status_matchers.h.
#ifndef EMBEDPS_COMMON_STATUS_MATCHERS_H_
#define EMBEDPS_COMMON_STATUS_MATCHERS_H_

#include <ostream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::testing {

inline const absl::Status& GetStatus(const absl::Status& status) {
  return status;
}

template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}

// Matches a Status or StatusOr whose code equals `code` and whose message
// matches `message_matcher` (any string matcher; default: anything).
MATCHER_P2(StatusIsImpl, code, message_matcher,
           std::string("has status code ") + absl::StatusCodeToString(code)) {
  const absl::Status& status = ::embedps::testing::GetStatus(arg);
  *result_listener << "whose status is " << status;
  return status.code() == code &&
         ::testing::ExplainMatchResult(
             message_matcher, std::string(status.message()), result_listener);
}

template <typename MessageMatcher>
auto StatusIs(absl::StatusCode code, MessageMatcher message_matcher) {
  return StatusIsImpl(code, ::testing::MatcherCast<const std::string&>(
                                std::move(message_matcher)));
}

inline auto StatusIs(absl::StatusCode code) {
  return StatusIs(code, ::testing::_);
}

inline auto IsOk() { return StatusIs(absl::StatusCode::kOk); }

}  // namespace embedps::testing

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::embedps::testing::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::embedps::testing::IsOk())

#define ASSERT_OK_AND_ASSIGN(lhs, rexpr) \
  EMBEDPS_ASSERT_OK_AND_ASSIGN_IMPL(     \
      EMBEDPS_MATCHERS_CONCAT(embedps_statusor_, __LINE__), lhs, rexpr)
#define EMBEDPS_MATCHERS_CONCAT_INNER(x, y) x##y
#define EMBEDPS_MATCHERS_CONCAT(x, y) EMBEDPS_MATCHERS_CONCAT_INNER(x, y)
#define EMBEDPS_ASSERT_OK_AND_ASSIGN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                      \
  ASSERT_OK(statusor);                                          \
  lhs = std::move(statusor).value()

#endif  // EMBEDPS_COMMON_STATUS_MATCHERS_H_
