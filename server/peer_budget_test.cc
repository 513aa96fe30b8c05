#include "server/peer_budget.h"

#include <optional>
#include <utility>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(PeerBudgetTest, HoldsAreBoundedPerHostAndReleased) {
  PeerBudget budget(100 * kMiB);
  ASSERT_OK_AND_ASSIGN(PeerBudget::Hold first,
                       budget.Acquire("ipv4:10.0.0.5:1000", 60 * kMiB));
  // Another connection of the same host shares the bound.
  EXPECT_THAT(budget.Acquire("ipv4:10.0.0.5:2000", 60 * kMiB).status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("60 MiB of Pull answers ipv4:10.0.0.5"),
                             HasSubstr("--max_unread_mb_per_peer"))));
  EXPECT_EQ(budget.held("ipv4:10.0.0.5:3"), 60 * kMiB);
  // Another host does not.
  ASSERT_OK_AND_ASSIGN(PeerBudget::Hold other,
                       budget.Acquire("ipv4:10.0.0.6:1000", 60 * kMiB));
  ASSERT_OK_AND_ASSIGN(PeerBudget::Hold second,
                       budget.Acquire("ipv4:10.0.0.5:2000", 40 * kMiB));
  EXPECT_EQ(budget.held("ipv4:10.0.0.5:1"), 100 * kMiB);
  { PeerBudget::Hold gone = std::move(first); }
  EXPECT_EQ(budget.held("ipv4:10.0.0.5:1"), 40 * kMiB);
  ASSERT_OK_AND_ASSIGN(PeerBudget::Hold third,
                       budget.Acquire("ipv4:10.0.0.5:2000", 60 * kMiB));
  second = std::move(third);  // releases what `second` held
  EXPECT_EQ(budget.held("ipv4:10.0.0.5:1"), 60 * kMiB);
}

TEST(PeerBudgetTest, ALoneAnswerLargerThanTheBoundIsGranted) {
  PeerBudget budget(10 * kMiB);
  std::optional<PeerBudget::Hold> big;
  ASSERT_OK_AND_ASSIGN(big, budget.Acquire("ipv4:1.2.3.4:5", 500 * kMiB));
  EXPECT_THAT(budget.Acquire("ipv4:1.2.3.4:6", 1).status(),
              StatusIs(absl::StatusCode::kUnavailable));
  big.reset();
  EXPECT_EQ(budget.held("ipv4:1.2.3.4:5"), 0u);
  EXPECT_OK(budget.Acquire("ipv4:1.2.3.4:6", 1).status());
}

TEST(PeerBudgetTest, ZeroMeansNoBound) {
  PeerBudget budget(0);
  ASSERT_OK_AND_ASSIGN(PeerBudget::Hold a,
                       budget.Acquire("ipv4:1.2.3.4:5", 1 << 30));
  ASSERT_OK_AND_ASSIGN(PeerBudget::Hold b,
                       budget.Acquire("ipv4:1.2.3.4:5", 1 << 30));
  EXPECT_EQ(budget.held("ipv4:1.2.3.4:9"), uint64_t{2} << 30);
}

}  // namespace
}  // namespace embedps::server
