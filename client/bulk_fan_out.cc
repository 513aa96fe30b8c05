#include "client/bulk_fan_out.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "grpcpp/support/stub_options.h"

namespace embedps::client {

BulkFanOut::BulkFanOut(const std::string& method_path, std::string method,
                       const RetryPolicy& policy, absl::Duration extra_time)
    : method_path_(method_path),
      method_(std::move(method)),
      policy_(policy),
      extra_time_(extra_time) {}

BulkFanOut::~BulkFanOut() {
  while (in_flight_ > 0) {
    WaitForCompletion(absl::InfiniteFuture());
    --in_flight_;
  }
}

void BulkFanOut::Start(grpc::GenericStub* stub, int32_t shard,
                       std::string server, grpc::ByteBuffer request) {
  Call& call = calls_.emplace_back();
  call.stub = stub;
  call.shard = shard;
  call.server = std::move(server);
  call.request = std::move(request);
  call.schedule = RetrySchedule(policy_, extra_time_);
  Attempt(calls_.size() - 1);
}

void BulkFanOut::Attempt(size_t index) {
  Call* const call = &calls_[index];
  call->context = std::make_unique<grpc::ClientContext>();
  call->context->set_deadline(
      absl::ToChronoTime(call->schedule.StartAttempt()));
  call->response.Clear();
  ++in_flight_;
  // The callback runs on one of gRPC's threads; it only hands the call
  // back to the thread in Finish.
  call->stub->UnaryCall(call->context.get(), method_path_, grpc::StubOptions(),
                        &call->request, &call->response,
                        [this, call, index](grpc::Status status) {
                          std::lock_guard<std::mutex> lock(mu_);
                          call->status = std::move(status);
                          completed_.push_back(index);
                          completed_cv_.notify_one();
                        });
}

size_t BulkFanOut::WaitForCompletion(absl::Time until) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto ready = [&] { return !completed_.empty(); };
  if (until == absl::InfiniteFuture()) {
    completed_cv_.wait(lock, ready);
  } else if (!completed_cv_.wait_until(lock, absl::ToChronoTime(until),
                                       ready)) {
    return calls_.size();
  }
  const size_t index = completed_.back();
  completed_.pop_back();
  return index;
}

absl::Status BulkFanOut::Finish(
    absl::FunctionRef<absl::Status(size_t call, const grpc::ByteBuffer&)>
        on_response) {
  absl::Status first_error;
  // Calls waiting out their backoff: (when to start the next attempt, call).
  std::vector<std::pair<absl::Time, size_t>> retries;
  while (in_flight_ > 0 || !retries.empty()) {
    absl::Time next_retry = absl::InfiniteFuture();
    for (const auto& [when, index] : retries) {
      next_retry = std::min(next_retry, when);
    }
    const size_t index = WaitForCompletion(next_retry);
    const absl::Time now = absl::Now();
    for (size_t r = 0; r < retries.size();) {
      if (retries[r].first <= now) {
        Attempt(retries[r].second);
        retries[r] = retries.back();
        retries.pop_back();
      } else {
        ++r;
      }
    }
    if (index == calls_.size()) continue;  // only a retry was due
    --in_flight_;
    Call& call = calls_[index];
    if (call.status.ok()) {
      first_error.Update(on_response(index, call.response));
      call.response.Clear();
      continue;
    }
    if (const std::optional<absl::Duration> backoff =
            call.schedule.BackoffAfter(call.status, now)) {
      retries.emplace_back(now + *backoff, index);
      continue;
    }
    first_error.Update(CallFailed(method_, call.shard, call.server,
                                  call.schedule.attempts(), call.status));
  }
  return first_error;
}

}  // namespace embedps::client
