#include "server/replica_sender.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/replication.grpc.pb.h"

namespace embedps::server {
namespace {

// A backup that takes `delay` to apply each Apply and records the
// sequences it applied.
class SlowBackup final : public proto::Replication::Service {
 public:
  explicit SlowBackup(absl::Duration delay) : delay_(delay) {}

  grpc::Status Apply(grpc::ServerContext*, const proto::ApplyRequest* request,
                     proto::ApplyResponse* response) override {
    absl::SleepFor(delay_);
    MutexLock lock(&mu_);
    for (const proto::ReplicatedOp& op : request->op()) {
      applied_.push_back(op.sequence());
    }
    response->set_applied_sequence(applied_.empty() ? 0 : applied_.back());
    return grpc::Status::OK;
  }

  std::vector<uint64_t> applied() {
    MutexLock lock(&mu_);
    return applied_;
  }

 private:
  const absl::Duration delay_;
  Mutex mu_;
  std::vector<uint64_t> applied_ ABSL_GUARDED_BY(mu_);
};

struct Backup {
  explicit Backup(absl::Duration delay) : service(delay) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
  }
  ~Backup() { server->Shutdown(absl::ToChronoTime(absl::Now())); }

  std::unique_ptr<ReplicaSender> Sender(absl::Duration timeout) {
    return std::make_unique<ReplicaSender>(
        "backup",
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()),
        /*epoch=*/1, "primary", timeout, /*max_bytes=*/1 << 20,
        /*active=*/true);
  }

  SlowBackup service;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

std::shared_ptr<const proto::ReplicatedOp> Op(uint64_t sequence) {
  auto op = std::make_shared<proto::ReplicatedOp>();
  op->set_sequence(sequence);
  op->set_push("rows");
  return op;
}

TEST(ReplicaSenderTest, ABackupAsSlowAsThePrimaryWasStaysInTheShard) {
  // The backup takes 4 × the timeout; the primary took as long itself.
  Backup backup(absl::Milliseconds(200));
  std::unique_ptr<ReplicaSender> sender = backup.Sender(absl::Milliseconds(50));
  sender->Enqueue(Op(1), absl::Milliseconds(500));
  EXPECT_TRUE(sender->WaitAcked(1)) << sender->error();
  EXPECT_FALSE(sender->failed());
  EXPECT_EQ(backup.service.applied(), std::vector<uint64_t>{1});
}

TEST(ReplicaSenderTest, ABackupSlowerThanTheTimeoutBeyondThePrimarysWorkFails) {
  Backup backup(absl::Seconds(2));
  std::unique_ptr<ReplicaSender> sender = backup.Sender(absl::Milliseconds(50));
  sender->Enqueue(Op(1), absl::Milliseconds(1));
  EXPECT_FALSE(sender->WaitAcked(1));
  EXPECT_TRUE(sender->failed());
  EXPECT_NE(sender->error().find("Deadline"), std::string::npos)
      << sender->error();
  // A failed sender takes nothing more.
  sender->Enqueue(Op(2), absl::ZeroDuration());
  EXPECT_FALSE(sender->WaitAcked(2));
}

TEST(ReplicaSenderTest, WritesArriveInSequence) {
  Backup backup(absl::Milliseconds(5));
  std::unique_ptr<ReplicaSender> sender = backup.Sender(absl::Seconds(10));
  for (uint64_t s = 1; s <= 20; ++s)
    sender->Enqueue(Op(s), absl::ZeroDuration());
  ASSERT_TRUE(sender->WaitAcked(20)) << sender->error();
  std::vector<uint64_t> expected;
  for (uint64_t s = 1; s <= 20; ++s) expected.push_back(s);
  EXPECT_EQ(backup.service.applied(), expected);
  EXPECT_EQ(sender->acked(), 20u);
}

}  // namespace
}  // namespace embedps::server
