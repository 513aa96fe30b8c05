#include "client/retry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "wire/grpc_status.h"

namespace embedps::client {

bool Retryable(const grpc::Status& status, absl::Time attempt_deadline) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE ||
         (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
          absl::Now() >= attempt_deadline - absl::Milliseconds(5));
}

absl::Status CallFailed(absl::string_view method, int32_t shard,
                        absl::string_view server, int attempts,
                        const grpc::Status& status) {
  const absl::Status error = wire::FromGrpcStatus(status);
  return absl::Status(
      error.code(),
      absl::StrCat(method, " on shard ", shard, " (", server, ") failed after ",
                   attempts, " attempt(s): ", error.message()));
}

RetrySchedule::RetrySchedule(const RetryPolicy& policy,
                             absl::Duration extra_time)
    : policy_(policy),
      extra_time_(extra_time),
      give_up_(absl::Now() + policy.retry_deadline),
      backoff_(policy.initial_backoff) {}

absl::Time RetrySchedule::StartAttempt() {
  ++attempts_;
  attempt_deadline_ = absl::Now() + policy_.rpc_timeout + extra_time_;
  return attempt_deadline_;
}

std::optional<absl::Duration> RetrySchedule::BackoffAfter(
    const grpc::Status& status, absl::Time now, bool other_replica) {
  const absl::Duration wait =
      other_replica ? std::min(backoff_, policy_.failover_backoff) : backoff_;
  if (!Retryable(status, attempt_deadline_) || now + wait > give_up_) {
    return std::nullopt;
  }
  if (!other_replica) backoff_ = std::min(backoff_ * 2, policy_.max_backoff);
  return wait;
}

}  // namespace embedps::client
