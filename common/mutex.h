// embedps's mutex: a reader-writer lock with abseil's thread-safety
// annotations, built on std::shared_mutex.
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

#include <shared_mutex>

#include "absl/base/thread_annotations.h"

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
  std::shared_mutex mu_;
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
