// BulkFanOut: the unary bulk calls of one Pull or Push (one per part of the
// batch), in flight together on gRPC's callback API — no thread per call,
// and none per asynchronous Pull or Push either.
//
// Each call starts as soon as the caller has built its request (Start), so
// building part k+1 overlaps part k's transfer and the server's work on it.
// Responses are handed to `on_response` on gRPC's callback threads as they
// arrive; calls that fail with UNAVAILABLE (or pass their own deadline) are
// retried with exponential backoff (a grpc::Alarm, no sleeping thread)
// until the retry deadline, without holding up the other calls. Once the
// caller has sealed the fan-out and every call has finished, `done` runs
// once with OK or the first error.
//
// Thread safety: one thread Starts and Seals; on_response may run for
// different calls at once (on gRPC's threads) and must be safe for that.
// The fan-out keeps itself alive until its last call has finished and
// runs `done` after letting go of itself: once `done` has run, nothing of
// the fan-out holds a channel (the caller may destroy them). The stubs
// must outlive it. Do not wait for `done` on one of gRPC's callback threads.
#ifndef EMBEDPS_CLIENT_BULK_FAN_OUT_H_
#define EMBEDPS_CLIENT_BULK_FAN_OUT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/retry.h"
#include "common/mutex.h"
#include "grpcpp/alarm.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace embedps::client {

class BulkFanOut : public std::enable_shared_from_this<BulkFanOut> {
 public:
  using OnResponse =
      std::function<absl::Status(size_t call, const grpc::ByteBuffer&)>;
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  // Asked of every attempt the server answered (any code but UNAVAILABLE),
  // with the call's context (the server's metadata): an error ends the
  // call with it, unretried, whatever the server said.
  using CheckServer =
      std::function<absl::Status(int32_t shard, const grpc::ClientContext&)>;

  // `method_path`: "/package.Service/Method"; `method`: its name in error
  // messages. `extra_time`: how long a server may legitimately hold a call
  // beyond rpc_timeout (a SYNC Pull waiting for other workers).
  // `on_response(call, response)` runs for each call that succeeded; its
  // first error becomes the fan-out's. `check_server`: may be null.
  static std::shared_ptr<BulkFanOut> Create(const std::string& method_path,
                                            std::string method,
                                            const RetryPolicy& policy,
                                            absl::Duration extra_time,
                                            OnResponse on_response,
                                            CheckServer check_server = nullptr);
  // A replicated shard's calls may move to another replica: asked, before
  // the retry, after an attempt answered UNAVAILABLE by `stub` (or found
  // no answer within its deadline: a hung replica); returns the stub for
  // the next attempt and whether it is another replica's (the retry then
  // waits RetryPolicy::failover_backoff at most). Default: the same stub.
  struct NextStub {
    grpc::GenericStub* stub;
    bool other_replica;
  };
  using Reroute =
      std::function<NextStub(int32_t shard, grpc::GenericStub* stub)>;
  // REQUIRES: before the first Start.
  void set_reroute(Reroute reroute) { reroute_ = std::move(reroute); }

  BulkFanOut(const BulkFanOut&) = delete;
  BulkFanOut& operator=(const BulkFanOut&) = delete;
  ~BulkFanOut();

  // Starts call number `calls_started()` to `stub` (shard `shard`, at
  // `server`, for messages) with `request`. REQUIRES: not sealed.
  void Start(grpc::GenericStub* stub, int32_t shard, std::string server,
             grpc::ByteBuffer request);
  size_t calls_started() const { return calls_.size(); }

  // No more calls: `done(status)` runs once every started call finished —
  // OK, or the first error: a call's after its retries (code of the last
  // attempt, message naming the shard and the attempts), or on_response's.
  // It runs on a gRPC thread, or on this one if every call has finished.
  void Seal(Done done);

  // Seal, then block until every call finished; returns the status.
  absl::Status Wait();

  // Ends the fan-out soon: attempts in flight are cancelled, none is
  // started or retried any more, and `done` runs with CANCELLED (or the
  // first error) once every call has ended — at most a backoff later (an
  // armed retry alarm is left to fire). For a client being destroyed.
  void Cancel();

 private:
  struct Call {
    size_t index;
    grpc::GenericStub* stub;
    int32_t shard;
    std::string server;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    // Shared: Cancel holds it while it cancels, outside the lock. Set by
    // Attempt and reset by Finished and Seal, under mu_.
    std::shared_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::Alarm> backoff;
    RetrySchedule schedule{RetryPolicy{}};
  };
  BulkFanOut(const std::string& method_path, std::string method,
             const RetryPolicy& policy, absl::Duration extra_time,
             OnResponse on_response, CheckServer check_server);
  // What is left once a call's callback has let go of the fan-out: `done`
  // with the fan-out's status, when the last call has finished (else
  // nothing).
  struct Ending {
    Done done;
    absl::Status status;
    void Run() &&;
  };
  // Starts the next attempt of `call`; its callback takes `self`, the
  // reference that keeps the fan-out alive.
  void Attempt(Call* call, std::shared_ptr<BulkFanOut> self);
  // An attempt of `call` ended with `status` (on a gRPC thread).
  Ending Completed(Call* call, grpc::Status status);
  // The call is finished, with `error` if it failed.
  Ending Finished(absl::Status error);
  // CANCELLED, naming the method.
  absl::Status Cancelled() const;

  const std::string method_path_;
  const std::string method_;
  const RetryPolicy policy_;
  const absl::Duration extra_time_;
  const OnResponse on_response_;
  const CheckServer check_server_;
  Reroute reroute_;
  // Stable addresses: gRPC and the callbacks hold pointers to calls (never
  // an index into the deque, which Start may grow meanwhile). Each call's
  // fields are touched by one attempt at a time.
  std::deque<Call> calls_;

  Mutex mu_;
  size_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  bool sealed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
  Done done_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_BULK_FAN_OUT_H_
