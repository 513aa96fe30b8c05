#include "client/bulk_fan_out.h"

#include <future>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/stub_options.h"

namespace embedps::client {

std::shared_ptr<BulkFanOut> BulkFanOut::Create(const std::string& method_path,
                                               std::string method,
                                               const RetryPolicy& policy,
                                               absl::Duration extra_time,
                                               OnResponse on_response,
                                               CheckServer check_server) {
  return std::shared_ptr<BulkFanOut>(
      new BulkFanOut(method_path, std::move(method), policy, extra_time,
                     std::move(on_response), std::move(check_server)));
}

BulkFanOut::BulkFanOut(const std::string& method_path, std::string method,
                       const RetryPolicy& policy, absl::Duration extra_time,
                       OnResponse on_response, CheckServer check_server)
    : method_path_(method_path),
      method_(std::move(method)),
      policy_(policy),
      extra_time_(extra_time),
      on_response_(std::move(on_response)),
      check_server_(std::move(check_server)) {}

BulkFanOut::~BulkFanOut() = default;

void BulkFanOut::Start(grpc::GenericStub* stub, int32_t shard,
                       std::string server, grpc::ByteBuffer request) {
  Call& call = calls_.emplace_back();
  call.index = calls_.size() - 1;
  call.stub = stub;
  call.shard = shard;
  call.server = std::move(server);
  call.request = std::move(request);
  call.schedule = RetrySchedule(policy_, extra_time_);
  {
    MutexLock lock(&mu_);
    ++unfinished_;
  }
  Attempt(&call, shared_from_this());
}

void BulkFanOut::Attempt(Call* call, std::shared_ptr<BulkFanOut> self) {
  grpc::ClientContext* context = nullptr;
  {
    MutexLock lock(&mu_);
    if (!cancelled_) {
      call->context = std::make_shared<grpc::ClientContext>();
      call->context->set_deadline(
          absl::ToChronoTime(call->schedule.StartAttempt()));
      context = call->context.get();
    }
  }
  if (context == nullptr) {
    Ending ending = Finished(Cancelled());
    self.reset();
    std::move(ending).Run();
    return;
  }
  call->response.Clear();
  // The callback holds the fan-out: it lives until its last call is done.
  // `done` runs only after the callback has let go of it. Once `done` has
  // run, the caller may destroy the client and its channels; were the
  // callback then to drop the last reference, the call contexts it
  // destroys would release the last reference to a channel on gRPC's own
  // callback thread, which then shuts down the queue that thread serves
  // from within (gRPC 1.51 aborts on it: "prior > 0").
  call->stub->UnaryCall(
      context, method_path_, grpc::StubOptions(), &call->request,
      &call->response,
      [self = std::move(self), call](grpc::Status status) mutable {
        Ending ending = self->Completed(call, std::move(status));
        self.reset();
        std::move(ending).Run();
      });
}

absl::Status BulkFanOut::Cancelled() const {
  return absl::CancelledError(
      absl::StrCat(method_, " cancelled: its client is being destroyed"));
}

void BulkFanOut::Cancel() {
  std::vector<std::shared_ptr<grpc::ClientContext>> live;
  {
    MutexLock lock(&mu_);
    cancelled_ = true;
    for (Call& call : calls_) {
      if (call.context != nullptr) live.push_back(call.context);
    }
  }
  // Outside the lock: a cancelled call's callback may run at once.
  for (const auto& context : live) context->TryCancel();
}

void BulkFanOut::Ending::Run() && {
  if (done != nullptr) std::move(done)(std::move(status));
}

BulkFanOut::Ending BulkFanOut::Completed(Call* call, grpc::Status status) {
  if (check_server_ != nullptr &&
      status.error_code() != grpc::StatusCode::UNAVAILABLE) {
    if (absl::Status who = check_server_(call->shard, *call->context);
        !who.ok()) {
      call->response.Clear();
      return Finished(std::move(who));
    }
  }
  if (status.ok()) {
    absl::Status handled = on_response_(call->index, call->response);
    call->response.Clear();
    return Finished(std::move(handled));
  }
  // UNAVAILABLE or no answer in time: the shard's next replica, if it has
  // several (a failover may be under way).
  NextStub next{call->stub, false};
  if (reroute_ != nullptr &&
      (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
       status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)) {
    next = reroute_(call->shard, call->stub);
  }
  if (const std::optional<absl::Duration> backoff = call->schedule.BackoffAfter(
          status, absl::Now(), next.other_replica)) {
    bool cancelled;
    {
      MutexLock lock(&mu_);
      cancelled = cancelled_;
    }
    if (cancelled) return Finished(Cancelled());
    call->stub = next.stub;
    // The next attempt starts from the alarm's callback, on a gRPC thread.
    call->backoff = std::make_unique<grpc::Alarm>();
    // The alarm keeps its callback until it is destroyed, and the call
    // owns the alarm: the callback gives up its reference to the fan-out
    // when it runs, or the two would keep each other alive.
    call->backoff->Set(
        absl::ToChronoTime(absl::Now() + *backoff),
        [self = shared_from_this(), call](bool /*fired*/) mutable {
          // The reference moves on to the attempt's callback: nothing here
          // holds the fan-out once the attempt is under way.
          BulkFanOut* const fan_out = self.get();
          fan_out->Attempt(call, std::move(self));
        });
    return {};
  }
  return Finished(CallFailed(method_, call->shard, call->server,
                             call->schedule.attempts(), status));
}

BulkFanOut::Ending BulkFanOut::Finished(absl::Status error) {
  MutexLock lock(&mu_);
  first_error_.Update(error);
  if (--unfinished_ > 0 || !sealed_) return {};
  // Every call is over: their contexts (each holds its channel) go now,
  // before `done`, whichever thread lets go of the fan-out last.
  for (Call& call : calls_) call.context.reset();
  return {std::move(done_), first_error_};
}

void BulkFanOut::Seal(Done done) {
  absl::Status status;
  {
    MutexLock lock(&mu_);
    sealed_ = true;
    if (unfinished_ > 0) {
      done_ = std::move(done);
      return;
    }
    status = first_error_;
    for (Call& call : calls_) call.context.reset();  // as in Finished
  }
  std::move(done)(std::move(status));
}

absl::Status BulkFanOut::Wait() {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  Seal([promise](absl::Status status) {
    promise->set_value(std::move(status));
  });
  return result.get();
}

}  // namespace embedps::client
