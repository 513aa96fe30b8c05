#include "server/coordination_store.h"

#include <atomic>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TEST(CoordinationStoreTest, SetGetAndBadKeys) {
  CoordinationStore store;
  EXPECT_THAT(store.Get("a"), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(store.Set("a", "1"));
  ASSERT_OK(store.Set("a", "2"));
  ASSERT_OK_AND_ASSIGN(std::string v, store.Get("a"));
  EXPECT_EQ(v, "2");
  EXPECT_THAT(store.Set("", "x"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store.Set(std::string(2000, 'k'), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      store.Set("big", std::string(CoordinationStore::kMaxValueBytes + 1, 'v')),
      StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CoordinationStoreTest,
     WaitReturnsWhenAllKeysAreSetAndNamesMissingOnTimeout) {
  CoordinationStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_OK(store.Set("x", "1"));
    ASSERT_OK(store.Set("y", "2"));
  });
  ASSERT_OK_AND_ASSIGN(auto values, store.Wait({"x", "y"}, absl::Seconds(10)));
  EXPECT_EQ(values, (std::vector<std::string>{"1", "2"}));
  setter.join();
  EXPECT_THAT(store.Wait({"x", "nope"}, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("missing: nope")));
}

TEST(CoordinationStoreTest, BarrierReleasesAllThenResets) {
  CoordinationStore store;
  for (int round = 1; round <= 3; ++round) {
    std::vector<std::thread> threads;
    std::atomic<int> passed{0};
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([&] {
        auto generation = store.Barrier("b", 3, absl::Seconds(10));
        ASSERT_OK(generation);
        EXPECT_EQ(*generation, static_cast<uint64_t>(round));
        passed.fetch_add(1);
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(passed.load(), 3);
  }
}

TEST(CoordinationStoreTest, BarrierTimeoutWithdrawsTheCaller) {
  CoordinationStore store;
  EXPECT_THAT(
      store.Barrier("b", 2, absl::Milliseconds(30)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1 of 2")));
  // The withdrawn caller does not count: two fresh callers pass together.
  std::thread other(
      [&] { ASSERT_OK(store.Barrier("b", 2, absl::Seconds(10))); });
  ASSERT_OK(store.Barrier("b", 2, absl::Seconds(10)));
  other.join();
  EXPECT_THAT(store.Barrier("b", 0, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CoordinationStoreTest, BarrierParticipantCountsMustAgree) {
  CoordinationStore store;
  std::thread waiter([&] {
    EXPECT_THAT(store.Barrier("c", 3, absl::Milliseconds(300)),
                StatusIs(absl::StatusCode::kDeadlineExceeded));
  });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_THAT(
      store.Barrier("c", 2, absl::Seconds(1)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("waiting for 3")));
  waiter.join();
}

TEST(CoordinationStoreTest, AFullStoreRefusesMoreAndKeepsWhatItHolds) {
  CoordinationStore store(
      CoordinationLimits{.max_entries = 3, .max_bytes = 100});
  ASSERT_OK(store.Set("a", std::string(40, 'x')));
  ASSERT_OK(store.Set("b", std::string(40, 'y')));
  // Bytes: a new key past 100 bytes, and a value grown past them.
  EXPECT_THAT(store.Set("c", std::string(30, 'z')),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("coordination store is full")));
  EXPECT_THAT(store.Set("a", std::string(60, 'x')),
              StatusIs(absl::StatusCode::kResourceExhausted));
  // Overwriting with the same or fewer bytes is fine.
  ASSERT_OK(store.Set("a", std::string(10, 'w')));
  EXPECT_EQ(store.Get("a").value_or(""), std::string(10, 'w'));
  // Entries: keys and barrier names together.
  ASSERT_OK(store.Set("c", "1"));
  EXPECT_THAT(store.Barrier("d", 1, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(store.Set("e", "1"),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(store.Get("b").value_or(""), std::string(40, 'y'));
  EXPECT_THAT(store.Get("e"), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace embedps::server
