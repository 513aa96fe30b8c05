// embedps's mutex and condition variable: a reader-writer lock with
// abseil's thread-safety annotations, built on std::shared_mutex, and a
// condition variable that waits on it. Every component uses these (no bare
// std::mutex), so that the annotations cover all shared state.
//
// Why not absl::Mutex: Debian's abseil is a prebuilt shared library
// without ThreadSanitizer instrumentation, so TSAN cannot see the
// happens-before edges of absl::Mutex and reports every guarded access as a
// race. std::shared_mutex is pthread_rwlock underneath, which TSAN
// intercepts, so `--config=tsan` checks our locking for real. The
// annotations keep clang's -Wthread-safety analysis working.
//
// Thread safety: it is a mutex.
#ifndef EMBEDPS_COMMON_MUTEX_H_
#define EMBEDPS_COMMON_MUTEX_H_

#include <condition_variable>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace embedps {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Takes the lock if it is free; never waits.
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  friend class CondVar;
  std::shared_mutex mu_;
};

// Waits for a change of state guarded by a Mutex, as absl::CondVar does.
// Wait with the mutex held exclusively; it is released while waiting and
// held again on return. Wake-ups may be spurious: wait in a loop on the
// condition.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { cv_.wait(mu->mu_); }
  // Returns true if `deadline` passed (the condition may hold regardless).
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return cv_.wait_until(mu->mu_, absl::ToChronoTime(deadline)) ==
           std::cv_status::timeout;
  }
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return WaitWithDeadline(mu, absl::Now() + timeout);
  }
  // Waits until pred() holds (checked with `mu` held).
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate pred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!pred()) Wait(mu);
  }
  // Waits until pred() holds or `deadline` passes; returns pred().
  template <typename Predicate>
  bool WaitUntil(Mutex* mu, absl::Time deadline, Predicate pred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    while (!pred()) {
      if (WaitWithDeadline(mu, deadline)) return pred();
    }
    return true;
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

// Holds `mu` exclusively for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// Holds `mu` shared for its scope.
class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->ReaderLock();
  }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace embedps

#endif  // EMBEDPS_COMMON_MUTEX_H_
