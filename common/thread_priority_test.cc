#include "common/thread_priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace embedps {
namespace {

int OwnNice() {
  return getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
}

TEST(ThreadPriorityTest, BackgroundIsNiceTenForThisThreadOnly) {
  const int before = OwnNice();
  int lowered = 0;
  std::thread background([&] {
    ToBackgroundPriority();
    lowered = OwnNice();
  });
  background.join();
  EXPECT_EQ(lowered, 10);
  EXPECT_EQ(OwnNice(), before);
}

TEST(ThreadPriorityTest, IdleWorkRunsOnAnIdleThreadAndReturnsItsStatus) {
  const int policy_before = sched_getscheduler(0);
  int policy = -1;
  int nice = 0;
  bool on_other_thread = false;
  const std::thread::id caller = std::this_thread::get_id();
  EXPECT_OK(RunAtIdlePriority([&] {
    policy = sched_getscheduler(0);
    nice = OwnNice();
    on_other_thread = std::this_thread::get_id() != caller;
    return absl::OkStatus();
  }));
  EXPECT_TRUE(on_other_thread);
  // Idle, or nice +10 where a sandbox refuses the policy.
  EXPECT_TRUE(policy == SCHED_IDLE || nice == 10) << policy << " " << nice;
  EXPECT_EQ(sched_getscheduler(0), policy_before) << "the caller unchanged";
  EXPECT_THAT(RunAtIdlePriority([] { return absl::DataLossError("bad"); }),
              embedps::testing::StatusIs(absl::StatusCode::kDataLoss));
}

}  // namespace
}  // namespace embedps
