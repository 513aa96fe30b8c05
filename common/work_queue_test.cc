#include "common/work_queue.h"

#include <atomic>
#include <memory>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace embedps {
namespace {

// Work runs on the queue's threads, several at once, and everything
// submitted before the destructor runs.
TEST(WorkQueueTest, RunsEverythingSubmittedOnItsThreads) {
  std::atomic<int> ran{0};
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> on_caller{false};
  {
    WorkQueue queue(3, 1000);
    for (int i = 0; i < 500; ++i) {
      ASSERT_TRUE(queue.TrySubmit([&] {
        if (std::this_thread::get_id() == caller) on_caller = true;
        ++ran;
      }));
    }
  }
  EXPECT_EQ(ran.load(), 500);
  EXPECT_FALSE(on_caller.load());
}

// With every thread busy, work past max_waiting is refused (and dropped),
// and the queue takes work again once it drains.
TEST(WorkQueueTest, RefusesWorkPastItsBound) {
  absl::Notification release;
  std::atomic<int> ran{0};
  WorkQueue queue(1, 2);
  absl::Notification started;
  ASSERT_TRUE(queue.TrySubmit([&] {
    started.Notify();
    release.WaitForNotification();
    ++ran;
  }));
  started.WaitForNotification();  // the thread is busy: the rest waits
  EXPECT_TRUE(queue.TrySubmit([&] { ++ran; }));
  EXPECT_TRUE(queue.TrySubmit([&] { ++ran; }));
  auto dropped = std::make_shared<int>(0);
  EXPECT_FALSE(queue.TrySubmit([&ran, dropped] { ++ran; }));
  EXPECT_EQ(dropped.use_count(), 1);  // the refused work was not kept
  release.Notify();
  while (ran.load() < 3) std::this_thread::yield();
  EXPECT_TRUE(queue.TrySubmit([&] { ++ran; }));
}

}  // namespace
}  // namespace embedps
