#include "server/replica_sender.h"

#include "absl/strings/str_cat.h"

namespace embedps::server {

void ReplicaSender::Run() {
  while (true) {
    proto::ApplyRequest request;
    absl::Duration primary_work;  // what applying the request took here
    {
      MutexLock lock(&mu_);
      changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || (active_ && !queue_.empty());
      });
      if (stopping_) return;
      size_t bytes = 0;
      for (const Queued& queued : queue_) {
        const size_t size = queued.op->ByteSizeLong();
        if (request.op_size() > 0 && bytes + size > max_bytes_) break;
        bytes += size;
        *request.add_op() = *queued.op;
        primary_work += queued.applied_in;
      }
    }
    request.set_epoch(epoch_);
    request.set_primary(primary_);
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + timeout_ + 2 * primary_work));
    proto::ApplyResponse response;
    const grpc::Status status = stub_->Apply(&context, request, &response);
    const uint64_t last = request.op(request.op_size() - 1).sequence();
    {
      MutexLock lock(&mu_);
      if (!status.ok() || response.applied_sequence() != last) {
        failed_ = true;
        error_ = status.ok()
                     ? absl::StrCat("applied ", response.applied_sequence(),
                                    " of ", last)
                     : status.error_message();
        queue_.clear();
      } else {
        acked_ = last;
        queue_.erase(queue_.begin(), queue_.begin() + request.op_size());
      }
    }
    changed_.SignalAll();
    if (!status.ok()) {
      MutexLock lock(&mu_);
      if (failed_) {
        changed_.Wait(
            &mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; });
        return;
      }
    }
  }
}

}  // namespace embedps::server
