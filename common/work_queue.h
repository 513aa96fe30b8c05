// WorkQueue: a fixed set of threads that run submitted work, oldest first,
// with a bound on the work waiting for a thread.
//
// For servers whose handlers must not block the RPC library's own threads
// (gRPC's callback API): a handler submits the blocking part and returns;
// the work finishes the call from one of these threads.
//
// Thread safety: thread-safe. The destructor runs everything submitted
// before it, then joins the threads.
#ifndef EMBEDPS_COMMON_WORK_QUEUE_H_
#define EMBEDPS_COMMON_WORK_QUEUE_H_

#include <cstddef>
#include <deque>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "common/mutex.h"

namespace embedps {

class WorkQueue {
 public:
  // REQUIRES: threads >= 1, max_waiting >= 1.
  WorkQueue(int threads, size_t max_waiting);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `work`; false (and `work` is dropped unrun) when max_waiting
  // items already wait.
  bool TrySubmit(absl::AnyInvocable<void() &&> work);

  size_t max_waiting() const { return max_waiting_; }

 private:
  void Run();

  const size_t max_waiting_;
  Mutex mu_;
  CondVar ready_;
  std::deque<absl::AnyInvocable<void() &&>> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace embedps

#endif  // EMBEDPS_COMMON_WORK_QUEUE_H_
