// CPU priorities of background threads: work a latency-bound server does
// besides its requests (a serving replica applying what training
// published) yields the cores to the requests when both want them.
//
// Linux only (per-thread nice values and scheduling policies). An
// unprivileged thread can lower its priority but never raise it back, so
// a thread lowered here stays lowered: RunAtIdlePriority uses a thread of
// its own for that reason.
#ifndef EMBEDPS_COMMON_THREAD_PRIORITY_H_
#define EMBEDPS_COMMON_THREAD_PRIORITY_H_

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace embedps {

// The calling thread to nice +10 (threads it starts inherit it): it still
// gets a share of a busy core (about a tenth against a nice-0 thread).
void ToBackgroundPriority();

// Runs `work` on a new thread of the idle scheduling policy (SCHED_IDLE:
// it runs only on cores nothing else wants, and threads it starts inherit
// that) and returns its status once it ended. For bulk work that holds no
// lock a request waits on: a preempted idle thread holding one would stall
// the request until the cores are free. If the policy cannot be set, the
// thread runs at nice +10 instead.
absl::Status RunAtIdlePriority(absl::FunctionRef<absl::Status()> work);

}  // namespace embedps

#endif  // EMBEDPS_COMMON_THREAD_PRIORITY_H_
