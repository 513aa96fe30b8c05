// The Coordination service through its client, in this process.
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/coordination_client.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/coordination.grpc.pb.h"
#include "testing/in_process_cluster.h"

namespace embedps {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TEST(CoordinationServiceTest, BarrierWaitAndTimeouts) {
  testing::InProcessCluster cluster;
  cluster.Start(2);
  const std::vector<std::string>& addresses_ = cluster.addresses();
  // Three workers, each with its own client, meet at a barrier twice and
  // exchange their ranks through the store.
  std::vector<std::thread> workers;
  std::atomic<int> through{0};
  for (int rank = 0; rank < 3; ++rank) {
    workers.emplace_back([&, rank] {
      auto store = *client::CoordinationClient::Create(addresses_[0]);
      ASSERT_OK(store->Set(absl::StrCat("addr/", rank),
                           absl::StrCat("worker-", rank)));
      ASSERT_OK_AND_ASSIGN(uint64_t g1,
                           store->Barrier("start", 3, absl::Seconds(20)));
      EXPECT_EQ(g1, 1u);
      ASSERT_OK_AND_ASSIGN(auto all, store->Wait({"addr/0", "addr/1", "addr/2"},
                                                 absl::Seconds(20)));
      EXPECT_EQ(all[2], "worker-2");
      ASSERT_OK_AND_ASSIGN(uint64_t g2,
                           store->Barrier("start", 3, absl::Seconds(20)));
      EXPECT_EQ(g2, 2u);
      through.fetch_add(1);
    });
  }
  for (auto& w : workers) w.join();
  EXPECT_EQ(through.load(), 3);

  auto store = *client::CoordinationClient::Create(addresses_[0]);
  EXPECT_THAT(store->Wait({"addr/0", "never"}, absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("missing: never")));
  EXPECT_THAT(
      store->Barrier("lonely", 2, absl::Milliseconds(200)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1 of 2")));
  EXPECT_THAT(store->Get("never"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store->Set("", "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// A caller that gives up (its call's deadline passes) is withdrawn from the
// barrier then, not at the longer timeout its request named: the server
// holds no thread for it, and the barrier's count stays true.
TEST(CoordinationServiceTest, ACallerWhoseDeadlinePassedLeavesTheBarrier) {
  testing::InProcessCluster cluster;
  cluster.Start(1);
  auto stub = proto::Coordination::NewStub(grpc::CreateChannel(
      cluster.addresses()[0], grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(200));
  proto::BarrierRequest request;
  request.set_name("b");
  request.set_participants(2);
  request.set_timeout_ms(60000);
  proto::BarrierResponse response;
  EXPECT_EQ(stub->Barrier(&context, request, &response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  absl::SleepFor(absl::Seconds(2));

  auto store = *client::CoordinationClient::Create(cluster.addresses()[0]);
  EXPECT_THAT(
      store->Barrier("b", 2, absl::Milliseconds(300)),
      StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("1 of 2")))
      << "the first caller is still counted as waiting";
}

}  // namespace
}  // namespace embedps
