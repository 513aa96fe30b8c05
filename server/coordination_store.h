// CoordinationStore: key-value rendezvous and named barriers, the state
// behind the Coordination service. Values are opaque bytes.
//
// Thread safety: thread-safe; Wait and Barrier block the calling thread
// (at most until their timeout).
#ifndef EMBEDPS_SERVER_COORDINATION_STORE_H_
#define EMBEDPS_SERVER_COORDINATION_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/mutex.h"

namespace embedps::server {

// What the store may hold, so that no caller can fill the server's memory
// through it (values are never removed while the server runs).
struct CoordinationLimits {
  // Keys and barrier names together. Default: 64 Ki.
  size_t max_entries = size_t{64} << 10;
  // Bytes of keys and values together. Default: 64 MiB.
  size_t max_bytes = size_t{64} << 20;
};

class CoordinationStore {
 public:
  // Largest key and value accepted (INVALID_ARGUMENT above).
  static constexpr size_t kMaxKeyBytes = 1024;
  static constexpr size_t kMaxValueBytes = 4 << 20;

  explicit CoordinationStore(CoordinationLimits limits = {})
      : limits_(limits) {}

  // RESOURCE_EXHAUSTED, changing nothing, if a new key or the value's size
  // would pass the limits (overwriting a key counts only the difference).
  absl::Status Set(const std::string& key, std::string value);

  // NOT_FOUND if `key` was never set.
  absl::StatusOr<std::string> Get(const std::string& key) const;

  // The values of `keys`, once all are set; DEADLINE_EXCEEDED after
  // `timeout`, naming the keys still missing.
  absl::StatusOr<std::vector<std::string>> Wait(
      absl::Span<const std::string> keys, absl::Duration timeout) const;

  // Returns when `participants` callers have arrived at barrier `name`
  // (then the barrier resets for its next use) with its generation.
  // INVALID_ARGUMENT if participants is 0 or differs from the count of
  // callers already waiting; DEADLINE_EXCEEDED after `timeout` (the caller
  // is withdrawn); RESOURCE_EXHAUSTED if a new name passes the limits.
  absl::StatusOr<uint64_t> Barrier(const std::string& name,
                                   uint32_t participants,
                                   absl::Duration timeout);

 private:
  struct BarrierState {
    uint32_t participants = 0;
    uint32_t arrived = 0;
    uint64_t generation = 0;
  };

  // RESOURCE_EXHAUSTED unless a new entry of `bytes` fits.
  absl::Status CheckRoomLocked(size_t new_entries, size_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinationLimits limits_;
  mutable Mutex mu_;
  mutable CondVar changed_;
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, BarrierState> barriers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_COORDINATION_STORE_H_
