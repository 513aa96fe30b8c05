#include "server/push_deduplicator.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace embedps::server {
namespace {

TEST(PushDeduplicatorTest, SecondAttemptGetsTheFirstOutcome) {
  PushDeduplicator dedup;
  EXPECT_EQ(dedup.Begin(1, 10).kind, PushDeduplicator::Decision::kApply);
  dedup.Finish(1, 10, absl::OkStatus());
  const auto again = dedup.Begin(1, 10);
  EXPECT_EQ(again.kind, PushDeduplicator::Decision::kDone);
  EXPECT_TRUE(again.status.ok());
  // Another client's sequence 10 is its own.
  EXPECT_EQ(dedup.Begin(2, 10).kind, PushDeduplicator::Decision::kApply);
  dedup.Finish(2, 10, absl::InvalidArgumentError("nan"));
  EXPECT_EQ(dedup.Begin(2, 10).status.code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(dedup.duplicates(), 2u);
}

TEST(PushDeduplicatorTest, SequenceZeroIsNeverDeduplicated) {
  PushDeduplicator dedup;
  EXPECT_EQ(dedup.Begin(1, 0).kind, PushDeduplicator::Decision::kApply);
  EXPECT_EQ(dedup.Begin(1, 0).kind, PushDeduplicator::Decision::kApply);
}

TEST(PushDeduplicatorTest, WindowBoundsMemory) {
  PushDeduplicator dedup(/*window=*/4);
  for (uint64_t s = 1; s <= 10; ++s) {
    ASSERT_EQ(dedup.Begin(7, s).kind, PushDeduplicator::Decision::kApply);
    dedup.Finish(7, s, absl::OkStatus());
  }
  EXPECT_EQ(dedup.Begin(7, 10).kind, PushDeduplicator::Decision::kDone);
  EXPECT_EQ(dedup.Begin(7, 2).kind,
            PushDeduplicator::Decision::kApply);  // forgotten
}

TEST(PushDeduplicatorTest, ConcurrentAttemptsApplyExactlyOnce) {
  PushDeduplicator dedup;
  std::atomic<int> applied{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (uint64_t s = 1; s <= 2000; ++s) {
        if (dedup.Begin(3, s).kind == PushDeduplicator::Decision::kApply) {
          applied.fetch_add(1);
          dedup.Finish(3, s, absl::OkStatus());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(applied.load(), 2000);
}

}  // namespace
}  // namespace embedps::server
