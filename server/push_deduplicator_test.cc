#include "server/push_deduplicator.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
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

TEST(PushDeduplicatorTest, AnAbandonedPushIsAppliedByItsRetry) {
  PushDeduplicator dedup;
  ASSERT_EQ(dedup.Begin(1, 5).kind, PushDeduplicator::Decision::kApply);
  dedup.Abandon(1, 5);
  ASSERT_EQ(dedup.Begin(1, 5).kind, PushDeduplicator::Decision::kApply);
  dedup.Finish(1, 5, absl::OkStatus());
  EXPECT_EQ(dedup.Begin(1, 5).kind, PushDeduplicator::Decision::kDone);
}

// A duplicate that arrives while the first attempt is in flight waits; if
// that attempt is abandoned (not applied), the waiting one applies it.
TEST(PushDeduplicatorTest, AWaiterOnAnAbandonedAttemptAppliesIt) {
  PushDeduplicator dedup;
  ASSERT_EQ(dedup.Begin(1, 9).kind, PushDeduplicator::Decision::kApply);
  std::atomic<int> kind{-1};
  std::thread waiter([&] { kind = dedup.Begin(1, 9).kind; });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(kind.load(), -1);  // still waiting
  dedup.Abandon(1, 9);
  waiter.join();
  EXPECT_EQ(kind.load(), PushDeduplicator::Decision::kApply);
}

// What a catch-up copies: the applied and the finished-OK sequences (not
// a failed one, not one still in flight and unapplied), per client; the
// importer refuses their retries and keeps them within its window.
TEST(PushDeduplicatorTest, ExportAndImportTheAppliedPushes) {
  PushDeduplicator dedup;
  for (uint64_t s : {1, 2, 3, 4}) {
    ASSERT_EQ(dedup.Begin(8, s).kind, PushDeduplicator::Decision::kApply);
  }
  dedup.Finish(8, 1, absl::OkStatus());
  dedup.Finish(8, 2, absl::InvalidArgumentError("nan"));
  dedup.MarkApplied(8, 3);  // applied, its backups not yet heard from
  auto applied = dedup.ExportApplied();
  std::sort(applied[8].begin(), applied[8].end());
  EXPECT_EQ(applied[8], (std::vector<uint64_t>{1, 3}));

  PushDeduplicator joiner(/*window=*/2);
  joiner.ImportApplied(8, applied[8]);
  EXPECT_EQ(joiner.Begin(8, 1).kind, PushDeduplicator::Decision::kDone);
  EXPECT_EQ(joiner.Begin(8, 3).kind, PushDeduplicator::Decision::kDone);
  EXPECT_EQ(joiner.Begin(8, 4).kind, PushDeduplicator::Decision::kApply);
  joiner.Finish(8, 4, absl::OkStatus());
  // Window 2: the oldest (1) is forgotten, 3 and 4 are kept.
  EXPECT_EQ(joiner.Begin(8, 3).kind, PushDeduplicator::Decision::kDone);
  EXPECT_EQ(joiner.Begin(8, 4).kind, PushDeduplicator::Decision::kDone);
  EXPECT_EQ(joiner.Begin(8, 1).kind, PushDeduplicator::Decision::kApply);
}

}  // namespace
}  // namespace embedps::server
