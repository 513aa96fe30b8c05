// Three ranks as threads, each with its own Gloo communicator over TCP on
// loopback, rendezvous through an InMemoryStore.
#include "dense/collective/gloo_communicator.h"

#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "dense/collective/in_memory_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr int kRanks = 3;

// Runs `body(rank, communicator)` on kRanks threads.
void RunRanks(const std::function<void(int, Communicator&)>& body,
              absl::Duration timeout = absl::Seconds(30)) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.world_size = kRanks;
      options.timeout = timeout;
      auto communicator = CreateGlooCommunicator(options, &store);
      ASSERT_OK(communicator);
      body(rank, **communicator);
    });
  }
  for (auto& t : threads) t.join();
}

// Small integers as floats: every sum is exact in any order.
std::vector<float> RankValues(int rank, size_t n) {
  std::mt19937 rng(rank * 7919 + n);
  std::uniform_int_distribution<int> value(-1000, 1000);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(value(rng));
  return v;
}

TEST(GlooCommunicatorTest, AllReduceSumAndMeanAreExact) {
  const std::vector<size_t> sizes = {0, 1, 7, 1000, 100003};
  RunRanks([&](int rank, Communicator& comm) {
    EXPECT_EQ(comm.rank(), rank);
    EXPECT_EQ(comm.world_size(), kRanks);
    for (size_t n : sizes) {
      std::vector<float> buffer = RankValues(rank, n);
      ASSERT_OK(comm.AllReduce(absl::MakeSpan(buffer), ReduceOp::kSum));
      std::vector<float> want(n, 0.0f);
      for (int r = 0; r < kRanks; ++r) {
        const std::vector<float> v = RankValues(r, n);
        for (size_t i = 0; i < n; ++i) want[i] += v[i];
      }
      ASSERT_EQ(buffer, want) << "size " << n;
      // Mean: rank r contributes 3·x + r, so the mean is 3·x + 1 exactly.
      std::vector<float> mean(n);
      for (size_t i = 0; i < n; ++i) mean[i] = 3.0f * (i % 11) + rank;
      ASSERT_OK(comm.AllReduce(absl::MakeSpan(mean), ReduceOp::kMean));
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(mean[i], 3.0f * (i % 11) + 1.0f);
    }
  });
}

TEST(GlooCommunicatorTest, BroadcastAllGatherBarrier) {
  RunRanks([&](int rank, Communicator& comm) {
    for (size_t n : {size_t{0}, size_t{5}, size_t{4097}}) {
      std::vector<float> buffer = RankValues(rank, n);
      ASSERT_OK(comm.Broadcast(absl::MakeSpan(buffer), /*root=*/2));
      ASSERT_EQ(buffer, RankValues(2, n));
      const std::vector<float> mine = RankValues(rank, n);
      std::vector<float> all(n * kRanks);
      ASSERT_OK(comm.AllGather(mine, absl::MakeSpan(all)));
      for (int r = 0; r < kRanks; ++r) {
        const std::vector<float> theirs = RankValues(r, n);
        ASSERT_TRUE(
            std::equal(theirs.begin(), theirs.end(), all.begin() + r * n));
      }
      ASSERT_OK(comm.Barrier());
    }
    std::vector<float> wrong(4);
    EXPECT_THAT(comm.AllGather(absl::MakeConstSpan(wrong).subspan(0, 2),
                               absl::MakeSpan(wrong)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("needs an output of 6")));
    EXPECT_THAT(comm.Broadcast(absl::MakeSpan(wrong), 3),
                StatusIs(absl::StatusCode::kInvalidArgument));
  });
}

TEST(GlooCommunicatorTest, AMissingRankTimesOutInsteadOfHanging) {
  InMemoryStore store;
  std::vector<std::thread> threads;
  // Ranks 0 and 1 of 3 arrive; rank 2 never does.
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      GlooOptions options;
      options.rank = rank;
      options.world_size = kRanks;
      options.timeout = absl::Milliseconds(500);
      const absl::Status status =
          CreateGlooCommunicator(options, &store).status();
      EXPECT_THAT(status.code(), AnyOf(absl::StatusCode::kDeadlineExceeded,
                                       absl::StatusCode::kUnavailable))
          << status;
      EXPECT_THAT(std::string(status.message()),
                  HasSubstr(absl::StrCat("rank ", rank)));
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCommunicatorTest, BadRankIsRefused) {
  InMemoryStore store;
  GlooOptions options;
  options.rank = 3;
  options.world_size = 3;
  EXPECT_THAT(CreateGlooCommunicator(options, &store),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace embedps::dense
