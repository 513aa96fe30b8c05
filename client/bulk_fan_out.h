// BulkFanOut: the unary bulk calls of one Pull or Push (one per part of the
// batch), in flight together from the calling thread on gRPC's callback
// API — no thread per call.
//
// Each call starts as soon as the caller has built its request (Start), so
// building part k+1 overlaps part k's transfer and the server's work on it.
// Finish hands each response to the caller, on the calling thread, as it
// arrives, and retries calls that failed with UNAVAILABLE (or passed their
// own deadline) with exponential backoff until the retry deadline, without
// holding up the other calls.
//
// Not thread-safe: one thread Starts and Finishes. Every started call is
// waited for before Finish returns (and by the destructor), so requests,
// responses and contexts never outlive their calls.
#ifndef EMBEDPS_CLIENT_BULK_FAN_OUT_H_
#define EMBEDPS_CLIENT_BULK_FAN_OUT_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/retry.h"
#include "grpcpp/client_context.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"

namespace embedps::client {

class BulkFanOut {
 public:
  // `method_path`: "/package.Service/Method"; `method`: its name in error
  // messages. `extra_time`: how long a server may legitimately hold a call
  // beyond rpc_timeout (a SYNC Pull waiting for other workers).
  BulkFanOut(const std::string& method_path, std::string method,
             const RetryPolicy& policy,
             absl::Duration extra_time = absl::ZeroDuration());
  BulkFanOut(const BulkFanOut&) = delete;
  BulkFanOut& operator=(const BulkFanOut&) = delete;
  // Waits for calls still in flight (after an early return of Finish's
  // caller, say).
  ~BulkFanOut();

  // Starts call number `calls_started()` to `stub` (shard `shard`, at
  // `server`, for messages) with `request`. `stub` must outlive this
  // object.
  void Start(grpc::GenericStub* stub, int32_t shard, std::string server,
             grpc::ByteBuffer request);
  size_t calls_started() const { return calls_.size(); }

  // Waits for every started call. `on_response(call, response)` runs on
  // this thread for each call that succeeded, as it arrives (in any
  // order). Returns OK, or the first error: a call's after its retries
  // (code of the last attempt, message naming the shard and the attempts),
  // or on_response's. Every call is finished either way.
  absl::Status Finish(
      absl::FunctionRef<absl::Status(size_t call, const grpc::ByteBuffer&)>
          on_response);

 private:
  struct Call {
    grpc::GenericStub* stub;
    int32_t shard;
    std::string server;
    grpc::ByteBuffer request;
    grpc::ByteBuffer response;
    std::unique_ptr<grpc::ClientContext> context;
    grpc::Status status;  // of the latest attempt, once it completed
    RetrySchedule schedule{RetryPolicy{}};
  };
  // Starts the next attempt of `call`.
  void Attempt(size_t index);
  // Blocks until an attempt has completed (returns its call) or `until`.
  // Returns calls_.size() on timeout.
  size_t WaitForCompletion(absl::Time until);

  const std::string method_path_;
  const std::string method_;
  const RetryPolicy policy_;
  const absl::Duration extra_time_;
  std::deque<Call> calls_;  // stable addresses: gRPC holds pointers
  size_t in_flight_ = 0;    // attempts started and not yet taken back

  std::mutex mu_;
  std::condition_variable completed_cv_;
  std::vector<size_t> completed_;  // guarded by mu_
};

}  // namespace embedps::client

#endif  // EMBEDPS_CLIENT_BULK_FAN_OUT_H_
