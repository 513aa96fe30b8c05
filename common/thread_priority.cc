#include "common/thread_priority.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

namespace embedps {

void ToBackgroundPriority() {
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
}

absl::Status RunAtIdlePriority(absl::FunctionRef<absl::Status()> work) {
  absl::Status status;
  std::thread idle([&] {
    sched_param param{};
    if (sched_setscheduler(0, SCHED_IDLE, &param) != 0) ToBackgroundPriority();
    status = work();
  });
  idle.join();
  return status;
}

}  // namespace embedps
