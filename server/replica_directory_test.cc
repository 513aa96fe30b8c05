#include "server/replica_directory.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;

class ReplicaDirectoryTest : public ::testing::Test {
 protected:
  ReplicaDirectoryTest() {
    ReplicaDirectoryOptions options;
    options.lease = absl::Seconds(2);
    options.grace = absl::Seconds(1);
    options.clock = [this] { return now_; };
    directory_ = std::make_unique<ReplicaDirectory>(options);
  }

  proto::ReplicaView Beat(const std::string& member, uint64_t incarnation,
                          int32_t shard = 0) {
    proto::HeartbeatRequest request;
    request.set_shard(shard);
    request.set_member(member);
    request.set_incarnation(incarnation);
    absl::StatusOr<proto::ReplicaView> view = directory_->Heartbeat(request);
    EXPECT_OK(view);
    return view.ok() ? *view : proto::ReplicaView();
  }

  absl::StatusOr<proto::ReplicaView> Report(const proto::ReplicaView& view,
                                            const std::string& subject,
                                            proto::ReplicaReport::Kind kind) {
    proto::ReplicaReport report;
    report.set_shard(view.shard());
    report.set_epoch(view.epoch());
    report.set_primary(view.primary());
    report.set_subject(subject);
    report.set_kind(kind);
    return directory_->Report(report);
  }

  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<ReplicaDirectory> directory_;
};

TEST_F(ReplicaDirectoryTest, TheFirstReplicaIsThePrimaryOthersCatchUp) {
  const proto::ReplicaView first = Beat("a", 1);
  EXPECT_EQ(first.primary(), "a");
  EXPECT_EQ(first.epoch(), 1u);
  EXPECT_NE(first.lineage(), 0u);
  EXPECT_THAT(first.in_sync(), ElementsAre("a"));
  const proto::ReplicaView second = Beat("b", 2);
  EXPECT_EQ(second.primary(), "a");
  EXPECT_THAT(second.in_sync(), ElementsAre("a"));
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView after,
                       Report(second, "b", proto::ReplicaReport::IN_SYNC));
  EXPECT_THAT(after.in_sync(), ElementsAre("a", "b"));
  // Shards are independent.
  EXPECT_EQ(Beat("c", 3, /*shard=*/1).primary(), "c");
}

TEST_F(ReplicaDirectoryTest, AnInSyncBackupTakesOverAfterLeaseAndGrace) {
  const proto::ReplicaView view = Beat("a", 1);
  Beat("b", 2);
  ASSERT_OK(Report(view, "b", proto::ReplicaReport::IN_SYNC));
  Beat("c", 3);  // not in sync: never chosen
  now_ += absl::Seconds(2);
  Beat("b", 2);
  Beat("c", 3);
  EXPECT_EQ(directory_->View(0)->primary(), "a");  // within lease + grace
  now_ += absl::Milliseconds(1100);
  Beat("c", 3);
  const proto::ReplicaView taken = Beat("b", 2);
  EXPECT_EQ(taken.primary(), "b");
  EXPECT_EQ(taken.epoch(), 2u);
  EXPECT_EQ(taken.lineage(), view.lineage());
  EXPECT_THAT(taken.in_sync(), ElementsAre("b"));
  // The old primary may no longer report anything.
  EXPECT_THAT(Report(view, "c", proto::ReplicaReport::IN_SYNC),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ReplicaDirectoryTest, ARestartedPrimaryIsReplacedAtOnce) {
  const proto::ReplicaView view = Beat("a", 1);
  Beat("b", 2);
  ASSERT_OK(Report(view, "b", proto::ReplicaReport::IN_SYNC));
  const proto::ReplicaView after = Beat("a", 11);  // a new process at "a"
  EXPECT_EQ(after.primary(), "b");
  EXPECT_EQ(after.epoch(), 2u);
  EXPECT_THAT(after.in_sync(), ElementsAre("b"));
}

TEST_F(ReplicaDirectoryTest, ARestartedBackupLeavesTheInSyncSet) {
  const proto::ReplicaView view = Beat("a", 1);
  Beat("b", 2);
  ASSERT_OK(Report(view, "b", proto::ReplicaReport::IN_SYNC));
  const proto::ReplicaView after = Beat("b", 22);
  EXPECT_EQ(after.primary(), "a");
  EXPECT_EQ(after.epoch(), 1u);
  EXPECT_THAT(after.in_sync(), ElementsAre("a"));
}

TEST_F(ReplicaDirectoryTest, WithNoInSyncReplicaTheShardWaitsForItsPrimary) {
  const proto::ReplicaView view = Beat("a", 1);
  Beat("b", 2);  // never in sync
  now_ += absl::Seconds(10);
  const proto::ReplicaView waiting = Beat("b", 2);
  EXPECT_EQ(waiting.primary(), "a");
  EXPECT_EQ(waiting.epoch(), 1u);
  // The primary comes back as a new process: its data is gone, and so is
  // the lineage.
  const proto::ReplicaView lost = Beat("a", 12);
  EXPECT_EQ(lost.primary(), "a");
  EXPECT_EQ(lost.epoch(), 2u);
  EXPECT_NE(lost.lineage(), view.lineage());
}

TEST_F(ReplicaDirectoryTest, FailedBackupsAreRemovedOnlyByThePrimary) {
  const proto::ReplicaView view = Beat("a", 1);
  Beat("b", 2);
  ASSERT_OK(Report(view, "b", proto::ReplicaReport::IN_SYNC));
  proto::ReplicaView impostor = view;
  impostor.set_primary("b");
  EXPECT_THAT(Report(impostor, "a", proto::ReplicaReport::FAILED),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView after,
                       Report(view, "b", proto::ReplicaReport::FAILED));
  EXPECT_THAT(after.in_sync(), ElementsAre("a"));
  EXPECT_THAT(Report(view, "zzz", proto::ReplicaReport::FAILED),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(Report(view, "a", proto::ReplicaReport::FAILED),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ReplicaDirectoryTest, BadHeartbeatsAndLimitsAreRefused) {
  proto::HeartbeatRequest request;
  request.set_shard(-1);
  request.set_member("a");
  request.set_incarnation(1);
  EXPECT_THAT(directory_->Heartbeat(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
  request.set_shard(0);
  request.set_incarnation(0);
  EXPECT_THAT(directory_->Heartbeat(request),
              StatusIs(absl::StatusCode::kInvalidArgument));
  for (int i = 0; i < 16; ++i) Beat(absl::StrCat("m", i), i + 1);
  request.set_member("one-too-many");
  request.set_incarnation(99);
  EXPECT_THAT(directory_->Heartbeat(request),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(directory_->View(7), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace embedps::server
