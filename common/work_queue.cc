#include "common/work_queue.h"

#include <utility>

namespace embedps {

WorkQueue::WorkQueue(int threads, size_t max_waiting)
    : max_waiting_(max_waiting) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this] { Run(); });
}

WorkQueue::~WorkQueue() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  ready_.SignalAll();
  for (std::thread& thread : threads_) thread.join();
}

bool WorkQueue::TrySubmit(absl::AnyInvocable<void() &&> work) {
  {
    MutexLock lock(&mu_);
    if (waiting_.size() >= max_waiting_) return false;
    waiting_.push_back(std::move(work));
  }
  ready_.Signal();
  return true;
}

void WorkQueue::Run() {
  while (true) {
    absl::AnyInvocable<void() &&> work;
    {
      MutexLock lock(&mu_);
      ready_.Wait(&mu_, [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !waiting_.empty();
      });
      // Stopping: what was submitted still runs.
      if (waiting_.empty()) return;
      work = std::move(waiting_.front());
      waiting_.pop_front();
    }
    std::move(work)();
  }
}

}  // namespace embedps
