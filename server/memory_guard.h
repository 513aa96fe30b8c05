// A process-wide memory limit, checked before work that would allocate:
// a call that would take the process past it is refused with
// RESOURCE_EXHAUSTED before anything is allocated, and the server keeps
// serving what fits (rather than being killed by the kernel, or by a
// container's OOM killer, with every table in it).
//
// The measure is the process's resident set (/proc/self/statm), read at
// most every `refresh` and shared by all callers: it counts everything the
// process holds (tables, RocksDB's memtables and block cache, gRPC's
// buffers), at the price of lagging a burst of calls by one refresh. The
// estimate a call gives (`bytes`) covers what it may add.
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_SERVER_MEMORY_GUARD_H_
#define EMBEDPS_SERVER_MEMORY_GUARD_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace embedps::server {

class MemoryGuard {
 public:
  // `limit_bytes` 0: no limit (Admit always OK, nothing is read).
  explicit MemoryGuard(uint64_t limit_bytes,
                       absl::Duration refresh = absl::Milliseconds(20));

  // OK if the resident set plus `bytes` stays within the limit;
  // RESOURCE_EXHAUSTED naming what() (called only then: Pulls and Pushes
  // ask on every call), both figures and the limit otherwise.
  absl::Status Admit(uint64_t bytes, absl::FunctionRef<std::string()> what);

  // What a Pull or Push of `keys` keys of width `dim` may add by creating
  // a row for each: the values and the optimizer's state (about as much
  // again), and a copy on the way.
  static uint64_t RowCreationBytes(uint64_t keys, uint64_t dim) {
    return 3 * keys * dim * sizeof(float);
  }

  // The resident set as last read (reads it if older than `refresh`).
  uint64_t resident_bytes();
  uint64_t limit_bytes() const { return limit_bytes_; }
  // Calls refused so far.
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  const uint64_t limit_bytes_;
  const int64_t refresh_ns_;
  std::atomic<uint64_t> resident_{0};
  std::atomic<int64_t> read_at_ns_{0};
  std::atomic<bool> reading_{false};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_MEMORY_GUARD_H_
