#include "client/identity_check.h"

#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::client {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

StatedIdentity At(
    const std::string& address, int index, int count,
    const std::string& cluster = "",
    proto::ServerIdentity::Role role = proto::ServerIdentity::TRAINING) {
  StatedIdentity stated;
  stated.address = address;
  stated.identity.set_cluster_id(cluster);
  stated.identity.set_role(role);
  stated.identity.set_shard_index(index);
  stated.identity.set_num_shards(count);
  return stated;
}

constexpr auto kTraining = proto::ServerIdentity::TRAINING;

TEST(IdentityCheckTest, AClusterInOrderPasses) {
  EXPECT_OK(CheckIdentities({At("a:1", 0, 2, "c"), At("b:1", 1, 2, "c")},
                            kTraining, ""));
  EXPECT_OK(CheckIdentities({At("a:1", 0, 2, "c"), At("b:1", 1, 2, "c")},
                            kTraining, "c"));
  EXPECT_OK(CheckIdentities({At("a:1", 0, 1)}, kTraining, ""));
}

TEST(IdentityCheckTest, ADuplicateShardNamesBothServers) {
  // Two servers started with the defaults (shard 0 of 1), given as two.
  EXPECT_THAT(
      CheckIdentities({At("a:1", 0, 1), At("b:2", 0, 1)}, kTraining, ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("server 0 (a:1) says it is a training shard "
                               "0 of 1"),
                     HasSubstr("server 1 (b:2) says it is a training shard "
                               "0 of 1"),
                     HasSubstr("both claim shard 0"))));
}

TEST(IdentityCheckTest, AWrongCountOrOrderIsRefused) {
  EXPECT_THAT(
      CheckIdentities({At("a:1", 0, 3), At("b:2", 1, 3)}, kTraining, ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("server 0 (a:1)"), HasSubstr("0 of 3"),
                     HasSubstr("the list has 2"))));
  EXPECT_THAT(
      CheckIdentities({At("a:1", 1, 2), At("b:2", 0, 2)}, kTraining, ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("server 0 (a:1) says it is a training shard "
                               "1 of 2 of no named cluster, at position 0"),
                     HasSubstr("server 1 (b:2) says it is a training shard "
                               "0 of 2 of no named cluster, at position 1"))));
}

TEST(IdentityCheckTest, AnotherClusterIsRefused) {
  EXPECT_THAT(
      CheckIdentities({At("a:1", 0, 2, "x"), At("b:2", 1, 2, "y")}, kTraining,
                      ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("server 1 (b:2)"), HasSubstr("cluster 'y'"),
                     HasSubstr("server 0 (a:1)"), HasSubstr("cluster 'x'"))));
  EXPECT_THAT(
      CheckIdentities({At("a:1", 0, 1, "x")}, kTraining, "prod"),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("cluster 'x'"), HasSubstr("cluster 'prod'"))));
  EXPECT_THAT(CheckIdentities({At("a:1", 0, 1)}, kTraining, "prod"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("no named cluster")));
}

TEST(IdentityCheckTest, AServerOfAnotherRoleIsRefused) {
  EXPECT_THAT(
      CheckIdentities({At("a:1", 0, 2),
                       At("b:2", 1, 2, "", proto::ServerIdentity::SERVING)},
                      kTraining, ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("server 1 (b:2) says it is a serving shard"),
                     HasSubstr("training shards"))));
  EXPECT_THAT(
      CheckIdentities({At("a:1", 0, 1, "", proto::ServerIdentity::COORDINATOR)},
                      kTraining, ""),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("the coordinator")));
}

TEST(IdentityCheckTest, WhatAServerSentIsQuotedShort) {
  const std::string huge(100000, 'z');
  const absl::Status status =
      CheckIdentities({At("a:1", 0, 1, huge)}, kTraining, "c");
  EXPECT_LT(status.message().size(), 2000u);
}

}  // namespace
}  // namespace embedps::client
