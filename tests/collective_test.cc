// Three ranks meet through the Coordination service of a real ps_server
// and allreduce with Gloo: the rendezvous path the workers use.
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "dense/collective/gloo_communicator.h"
#include "gtest/gtest.h"
#include "testing/server_process.h"
#include "worker/coordination_store.h"

namespace embedps {
namespace {

TEST(CollectiveTest, GlooRendezvousThroughTheCoordinationService) {
  ASSERT_OK_AND_ASSIGN(auto server,
                       testing::ServerProcess::Start("server/ps_server", {}));
  constexpr int kRanks = 3;
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < kRanks; ++rank) {
    ranks.emplace_back([&, rank] {
      ASSERT_OK_AND_ASSIGN(
          std::unique_ptr<client::CoordinationClient> client,
          client::CoordinationClient::Create(server->address()));
      worker::CoordinationStore store(std::move(client));
      dense::GlooOptions options;
      options.rank = rank;
      options.world_size = kRanks;
      options.timeout = absl::Seconds(30);
      options.store_prefix = "job-1/gloo";
      ASSERT_OK_AND_ASSIGN(auto comm,
                           dense::CreateGlooCommunicator(options, &store));
      std::vector<float> buffer(1001);
      for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = rank * 1000.0f + i;
      ASSERT_OK(comm->AllReduce(absl::MakeSpan(buffer), dense::ReduceOp::kSum));
      for (size_t i = 0; i < buffer.size(); ++i) {
        ASSERT_EQ(buffer[i], 3000.0f + 3.0f * i) << i;
      }
      ASSERT_OK(comm->Barrier());
    });
  }
  for (auto& r : ranks) r.join();
  EXPECT_EQ(server->Stop(), 0);
}

}  // namespace
}  // namespace embedps
