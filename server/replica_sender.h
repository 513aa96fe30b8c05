// ReplicaSender: forwards a primary's writes to one backup, in sequence
// order, several per Apply when they queue up (replicator.h). A sender
// that fails stays failed; the replicator reports the backup.
//
// An Apply fails when it takes longer than the timeout plus twice the time
// the primary took to apply the writes it carries: the backup must do the
// same work (a CreateTable that reserves a large table takes seconds on
// any replica), perhaps on a busier host; the timeout alone bounds how
// long a backup that stopped answering holds the shard's writes.
//
// Thread safety: thread-safe; one thread of its own sends.
#ifndef EMBEDPS_SERVER_REPLICA_SENDER_H_
#define EMBEDPS_SERVER_REPLICA_SENDER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "proto/replication.grpc.pb.h"

namespace embedps::server {

class ReplicaSender {
 public:
  ReplicaSender(std::string member, std::shared_ptr<grpc::Channel> channel,
                uint64_t epoch, std::string primary, absl::Duration timeout,
                size_t max_bytes, bool active)
      : member_(std::move(member)),
        stub_(proto::Replication::NewStub(std::move(channel))),
        epoch_(epoch),
        primary_(std::move(primary)),
        timeout_(timeout),
        max_bytes_(max_bytes),
        active_(active),
        thread_([this] { Run(); }) {}

  ~ReplicaSender() {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      failed_ = true;
    }
    changed_.SignalAll();
    thread_.join();
  }

  const std::string& member() const { return member_; }

  // `applied_in`: how long the primary took to apply `op`.
  void Enqueue(std::shared_ptr<const proto::ReplicatedOp> op,
               absl::Duration applied_in) {
    {
      MutexLock lock(&mu_);
      if (failed_) return;
      queue_.push_back({std::move(op), applied_in});
    }
    changed_.SignalAll();
  }

  // Starts sending (a catching-up replica: once it has the state).
  void Activate() {
    {
      MutexLock lock(&mu_);
      active_ = true;
    }
    changed_.SignalAll();
  }

  // Every write from now on waits for this backup.
  void set_required() {
    MutexLock lock(&mu_);
    required_ = true;
  }
  bool required() {
    MutexLock lock(&mu_);
    return required_;
  }

  // The last sequence the backup applied (0: none yet).
  uint64_t acked() {
    MutexLock lock(&mu_);
    return acked_;
  }

  // True once the backup applied `sequence`; false if it failed first.
  bool WaitAcked(uint64_t sequence) {
    MutexLock lock(&mu_);
    changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return acked_ >= sequence || failed_;
    });
    return acked_ >= sequence;
  }

  bool failed() {
    MutexLock lock(&mu_);
    return failed_;
  }
  std::string error() {
    MutexLock lock(&mu_);
    return error_;
  }

 private:
  // The sending thread: Applies what queues up, in order, until stopped.
  void Run();

  const std::string member_;
  const std::unique_ptr<proto::Replication::Stub> stub_;
  const uint64_t epoch_;
  const std::string primary_;
  const absl::Duration timeout_;
  const size_t max_bytes_;
  Mutex mu_;
  CondVar changed_;
  struct Queued {
    std::shared_ptr<const proto::ReplicatedOp> op;
    absl::Duration applied_in;
  };
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t acked_ ABSL_GUARDED_BY(mu_) = 0;
  bool active_ ABSL_GUARDED_BY(mu_);
  bool required_ ABSL_GUARDED_BY(mu_) = false;
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_REPLICA_SENDER_H_
