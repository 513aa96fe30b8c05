// Retries of the client's RPCs: which failures are tried again, how long
// to wait between attempts, and the error a call reports when it gives up.
// Shared by the blocking control-plane calls (Client) and the bulk Pull and
// Push calls (BulkFanOut).
#ifndef EMBEDPS_CLIENT_RETRY_H_
#define EMBEDPS_CLIENT_RETRY_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/support/status.h"

namespace embedps::client {

struct RetryPolicy {
  // Deadline of one attempt (plus the call's extra time). Default: 30 s.
  absl::Duration rpc_timeout = absl::Seconds(30);
  // How long a call keeps retrying. Default: 60 s.
  absl::Duration retry_deadline = absl::Seconds(60);
  // First backoff between attempts; doubles up to max_backoff.
  // Default: 50 ms and 2 s.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(2);
  // The wait before an attempt at another replica of the shard (the last
  // one answered UNAVAILABLE or not in time: a failover may be under way),
  // at most; the doubling pauses meanwhile. A backoff grown over the
  // failover's seconds would find the new primary seconds after it took
  // over. Default: 100 ms.
  absl::Duration failover_backoff = absl::Milliseconds(100);
};

// Whether an attempt that ended with `status` should be tried again:
// UNAVAILABLE, and DEADLINE_EXCEEDED when it was the attempt's own deadline
// that passed (a server that answers DEADLINE_EXCEEDED early, e.g. a SYNC
// Pull that gave up waiting for other workers, has decided).
bool Retryable(const grpc::Status& status, absl::Time attempt_deadline);

// The error a call reports after its last attempt: the attempt's code, and
// a message naming the method, the shard, its server and the attempts.
absl::Status CallFailed(absl::string_view method, int32_t shard,
                        absl::string_view server, int attempts,
                        const grpc::Status& status);

// The attempts of one call under a RetryPolicy; the retry deadline runs
// from construction. Not thread-safe.
class RetrySchedule {
 public:
  // `extra_time`: how long a server may legitimately hold the call (a SYNC
  // Pull waiting for other workers), added to every attempt's deadline.
  explicit RetrySchedule(const RetryPolicy& policy,
                         absl::Duration extra_time = absl::ZeroDuration());

  // Starts an attempt now: counts it and returns its deadline.
  absl::Time StartAttempt();
  int attempts() const { return attempts_; }

  // After the latest attempt failed with `status`, at `now`: how long to
  // wait before the next one, or nullopt if the call gives up (the failure
  // is not Retryable, or the wait would end past the retry deadline).
  // `other_replica`: the next attempt goes to another replica of the shard
  // (RetryPolicy::failover_backoff).
  std::optional<absl::Duration> BackoffAfter(const grpc::Status& status,
                                             absl::Time now,
                                             bool other_replica = false);

 private:
  RetryPolicy policy_;
  absl::Duration extra_time_;
  absl::Time give_up_;  // no attempt starts after this
  absl::Duration backoff_;
  absl::Time attempt_deadline_ = absl::InfinitePast();
  int attempts_ = 0;
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_RETRY_H_
