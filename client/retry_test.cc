#include "client/retry.h"

#include <optional>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"

namespace embedps::client {
namespace {

const grpc::Status kUnavailable(grpc::StatusCode::UNAVAILABLE, "down");

RetryPolicy Policy() {
  RetryPolicy policy;
  policy.rpc_timeout = absl::Seconds(5);
  policy.retry_deadline = absl::Seconds(10);
  policy.initial_backoff = absl::Milliseconds(100);
  policy.max_backoff = absl::Milliseconds(400);
  return policy;
}

TEST(RetryScheduleTest, BackoffDoublesUpToItsMaximum) {
  RetrySchedule schedule(Policy());
  const absl::Time now = absl::Now();
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 5; ++i) {
    schedule.StartAttempt();
    waits.push_back(schedule.BackoffAfter(kUnavailable, now).value());
  }
  EXPECT_THAT(waits, ::testing::ElementsAre(
                         absl::Milliseconds(100), absl::Milliseconds(200),
                         absl::Milliseconds(400), absl::Milliseconds(400),
                         absl::Milliseconds(400)));
  EXPECT_EQ(schedule.attempts(), 5);
}

// Moving between the replicas of a shard (a failover under way), the wait
// stays short and the doubling pauses; back at one server, it goes on.
TEST(RetryScheduleTest, AttemptsAtAnotherReplicaWaitTheFailoverBackoff) {
  RetryPolicy policy = Policy();
  policy.failover_backoff = absl::Milliseconds(30);
  RetrySchedule schedule(policy);
  const absl::Time now = absl::Now();
  std::vector<absl::Duration> waits;
  for (bool other : {false, false, true, true, true, false}) {
    schedule.StartAttempt();
    waits.push_back(schedule.BackoffAfter(kUnavailable, now, other).value());
  }
  EXPECT_THAT(waits, ::testing::ElementsAre(
                         absl::Milliseconds(100), absl::Milliseconds(200),
                         absl::Milliseconds(30), absl::Milliseconds(30),
                         absl::Milliseconds(30), absl::Milliseconds(400)));
  // A call that gives up still gives up.
  EXPECT_FALSE(schedule
                   .BackoffAfter(grpc::Status(grpc::StatusCode::INTERNAL, "x"),
                                 now, true)
                   .has_value());
}

TEST(RetryScheduleTest, GivesUpWhenTheWaitWouldEndPastTheRetryDeadline) {
  RetrySchedule schedule(Policy());
  schedule.StartAttempt();
  const absl::Time start = absl::Now();
  EXPECT_TRUE(schedule.BackoffAfter(kUnavailable, start).has_value());
  // 10 s after construction the retry deadline has passed.
  EXPECT_FALSE(schedule.BackoffAfter(kUnavailable, start + absl::Seconds(10))
                   .has_value());
}

TEST(RetryScheduleTest, OnlyUnavailableAndTheAttemptsOwnDeadlineAreRetried) {
  RetrySchedule schedule(Policy());
  schedule.StartAttempt();
  const absl::Time now = absl::Now();
  EXPECT_FALSE(
      schedule
          .BackoffAfter(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad"),
                        now)
          .has_value());
  // DEADLINE_EXCEEDED long before the attempt's own deadline (5 s): the
  // server decided (a SYNC Pull that gave up), not a lost attempt.
  EXPECT_FALSE(
      schedule
          .BackoffAfter(
              grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "gave up"), now)
          .has_value());

  RetryPolicy short_attempts = Policy();
  short_attempts.rpc_timeout = absl::ZeroDuration();
  RetrySchedule expired(short_attempts);
  expired.StartAttempt();
  EXPECT_TRUE(
      expired
          .BackoffAfter(
              grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "timed out"),
              absl::Now())
          .has_value());
}

TEST(RetryScheduleTest, ExtraTimeExtendsEveryAttemptsDeadline) {
  RetrySchedule schedule(Policy(), absl::Seconds(20));
  const absl::Time before = absl::Now();
  const absl::Time deadline = schedule.StartAttempt();
  EXPECT_GE(deadline, before + absl::Seconds(25));
  EXPECT_LE(deadline, absl::Now() + absl::Seconds(25));
}

TEST(CallFailedTest, KeepsTheCodeAndNamesMethodShardServerAndAttempts) {
  const absl::Status failed =
      CallFailed("Pull", 2, "host:7000", 3, kUnavailable);
  EXPECT_THAT(failed, ::embedps::testing::StatusIs(
                          absl::StatusCode::kUnavailable,
                          ::testing::AllOf(::testing::HasSubstr("Pull"),
                                           ::testing::HasSubstr("shard 2"),
                                           ::testing::HasSubstr("host:7000"),
                                           ::testing::HasSubstr("3 attempt"),
                                           ::testing::HasSubstr("down"))));
}

}  // namespace
}  // namespace embedps::client
