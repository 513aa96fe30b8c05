// The control plane on etcd with real members (Debian's etcd-server, 3 on
// loopback): the client (control/etcd_client.h) and the replica
// directory's rules kept in etcd (server/etcd_directory_client.h), over
// plain HTTP and TLS, with members killed. tests/replication_test runs
// replicated ps_server processes over the same (ControlPlanes/...Etcd).
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "control/etcd_client.h"
#include "gtest/gtest.h"
#include "server/etcd_directory_client.h"
#include "testing/etcd_cluster.h"
#include "worker/etcd_store.h"

namespace embedps {
namespace {

using ::embedps::control::EtcdClient;
using ::embedps::control::EtcdCompare;
using ::embedps::control::EtcdOptions;
using ::embedps::control::EtcdWrite;
using ::embedps::server::EtcdDirectoryClient;
using ::embedps::server::EtcdDirectoryOptions;
using ::embedps::testing::EtcdCluster;

std::unique_ptr<EtcdClient> ClientOf(const std::string& endpoints) {
  EtcdOptions options;
  options.endpoints = endpoints;
  auto client = EtcdClient::Create(options);
  EXPECT_OK(client.status());
  return client.ok() ? *std::move(client) : nullptr;
}

class EtcdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto cluster = EtcdCluster::Start(3);
    ASSERT_OK(cluster.status());
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }

  // A directory client of `cluster_id`, as one replica holds it.
  std::unique_ptr<EtcdDirectoryClient> Directory(
      const std::string& cluster_id) {
    EtcdDirectoryOptions options;
    options.cluster_id = cluster_id;
    return std::make_unique<EtcdDirectoryClient>(
        ClientOf(cluster_->endpoints()), options);
  }

  static proto::HeartbeatRequest Beat(const std::string& member,
                                      uint64_t incarnation) {
    proto::HeartbeatRequest request;
    request.set_shard(0);
    request.set_member(member);
    request.set_incarnation(incarnation);
    return request;
  }

  static proto::ReplicaReport Report(const proto::ReplicaView& view,
                                     const std::string& subject,
                                     proto::ReplicaReport::Kind kind) {
    proto::ReplicaReport report;
    report.set_shard(0);
    report.set_epoch(view.epoch());
    report.set_primary(view.primary());
    report.set_subject(subject);
    report.set_kind(kind);
    return report;
  }

  static absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

  // Ends `member`'s lease as etcd would when it stops renewing it.
  void ExpireLease(const std::string& cluster_id, const std::string& member) {
    auto etcd = ClientOf(cluster_->endpoints());
    ASSERT_OK_AND_ASSIGN(control::EtcdRange range,
                         etcd->Get(absl::StrCat("/embedps/", cluster_id,
                                                "/shards/0/members/", member)));
    ASSERT_EQ(range.kvs.size(), 1u);
    ASSERT_NE(range.kvs[0].lease, 0);
    ASSERT_OK(etcd->Revoke(range.kvs[0].lease));
  }

  static EtcdCluster* cluster_;
};

EtcdCluster* EtcdTest::cluster_ = nullptr;

TEST_F(EtcdTest, ClientReadsWritesAndTransacts) {
  auto etcd = ClientOf(cluster_->endpoints());
  ASSERT_OK_AND_ASSIGN(const int64_t put, etcd->Put("/t/a", "one"));
  EXPECT_GT(put, 0);
  ASSERT_OK(etcd->Put("/t/b", std::string("\0\xff", 2)).status());
  ASSERT_OK(etcd->Put("/u", "other").status());
  ASSERT_OK_AND_ASSIGN(control::EtcdRange one, etcd->Get("/t/a"));
  ASSERT_EQ(one.kvs.size(), 1u);
  EXPECT_EQ(one.kvs[0].value, "one");
  EXPECT_EQ(one.kvs[0].mod_revision, put);
  ASSERT_OK_AND_ASSIGN(control::EtcdRange prefix,
                       etcd->Get("/t/", /*prefix=*/true));
  ASSERT_EQ(prefix.kvs.size(), 2u);
  EXPECT_EQ(prefix.kvs[1].value, std::string("\0\xff", 2));  // bytes kept
  ASSERT_OK_AND_ASSIGN(control::EtcdRange none, etcd->Get("/t/none"));
  EXPECT_TRUE(none.kvs.empty());

  // A transaction on a stale revision changes nothing.
  ASSERT_OK_AND_ASSIGN(
      control::EtcdTxnResult stale,
      etcd->Txn({EtcdCompare::ModifiedAt("/t/a", put - 1)},
                {EtcdWrite::Put("/t/a", "two"), EtcdWrite::Delete("/t/b")}));
  EXPECT_FALSE(stale.succeeded);
  ASSERT_OK_AND_ASSIGN(control::EtcdRange still, etcd->Get("/t/", true));
  EXPECT_EQ(still.kvs.size(), 2u);
  EXPECT_EQ(still.kvs[0].value, "one");
  ASSERT_OK_AND_ASSIGN(
      control::EtcdTxnResult fresh,
      etcd->Txn({EtcdCompare::ModifiedAt("/t/a", put),
                 EtcdCompare::Absent("/t/none")},
                {EtcdWrite::Put("/t/a", "two"), EtcdWrite::Delete("/t/b")}));
  EXPECT_TRUE(fresh.succeeded);
  ASSERT_OK_AND_ASSIGN(control::EtcdRange after, etcd->Get("/t/", true));
  ASSERT_EQ(after.kvs.size(), 1u);
  EXPECT_EQ(after.kvs[0].value, "two");

  // Leases: a key bound to one goes with it.
  ASSERT_OK_AND_ASSIGN(control::EtcdLease lease, etcd->Grant(5));
  EXPECT_GE(lease.ttl_seconds, 5);
  ASSERT_OK(etcd->Put("/t/leased", "x", lease.id).status());
  ASSERT_OK_AND_ASSIGN(const int64_t ttl, etcd->KeepAlive(lease.id));
  EXPECT_GT(ttl, 0);
  ASSERT_OK_AND_ASSIGN(const int64_t granted, etcd->GrantedTtl(lease.id));
  EXPECT_EQ(granted, lease.ttl_seconds);
  ASSERT_OK(etcd->Revoke(lease.id));
  ASSERT_OK_AND_ASSIGN(control::EtcdRange gone, etcd->Get("/t/leased"));
  EXPECT_TRUE(gone.kvs.empty());
  ASSERT_OK_AND_ASSIGN(const int64_t expired, etcd->KeepAlive(lease.id));
  EXPECT_EQ(expired, 0);
  EXPECT_TRUE(absl::IsNotFound(etcd->GrantedTtl(lease.id).status()));
  // A key bound to a lease that does not exist: etcd's own error.
  const absl::Status no_lease = etcd->Put("/t/x", "y", 12345).status();
  EXPECT_TRUE(absl::IsNotFound(no_lease)) << no_lease;
  EXPECT_TRUE(absl::IsInvalidArgument(etcd->Grant(0).status()));
}

TEST_F(EtcdTest, EndpointsThatCannotWorkAreRefused) {
  for (const char* bad :
       {"", "127.0.0.1:2379", "http://127.0.0.1:2379", "etcd://", "etcd://host",
        "etcd://host:0", "etcd://host:99999", "etcd://:2379",
        "etcd://host:12/x"}) {
    EtcdOptions options;
    options.endpoints = bad;
    EXPECT_TRUE(absl::IsInvalidArgument(EtcdClient::Create(options).status()))
        << bad;
  }
  EtcdOptions tls;
  tls.endpoints = "etcds://127.0.0.1:2379";
  const absl::Status no_ca = EtcdClient::Create(tls).status();
  EXPECT_TRUE(absl::IsInvalidArgument(no_ca));
  EXPECT_TRUE(absl::StrContains(no_ca.message(), "--tls_ca")) << no_ca;
}

// Members that do not answer are skipped; with none, UNAVAILABLE names
// every endpoint tried.
TEST_F(EtcdTest, DeadMembersAreSkippedAndNamed) {
  // Port 1 on loopback: nothing listens there.
  auto etcd = ClientOf(
      absl::StrCat("etcd://127.0.0.1:1,", cluster_->client_address(0)));
  ASSERT_OK(etcd->Put("/skip", "ok").status());
  auto dead = ClientOf("etcd://127.0.0.1:1,127.0.0.1:2");
  const absl::Status status = dead->Get("/skip").status();
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "127.0.0.1:1")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "127.0.0.1:2")) << status;
}

// The directory's rules, as the coordinator keeps them
// (server/replica_directory_test), kept in etcd.
TEST_F(EtcdTest, DirectoryElectsFailsOverAndFencesOldEpochs) {
  const std::string cluster = "rules";
  auto a = Directory(cluster);
  auto b = Directory(cluster);
  // The first replica is the primary of a new lineage.
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView first,
                       a->Heartbeat(Beat("a:1", 11), Soon()));
  EXPECT_EQ(first.primary(), "a:1");
  EXPECT_GT(first.epoch(), 0u);
  EXPECT_NE(first.lineage(), 0u);
  EXPECT_GE(first.lease_ms(), 1000u);
  ASSERT_EQ(first.in_sync_size(), 1);
  // The second joins out of sync; a heartbeat changes nothing else.
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView joined,
                       b->Heartbeat(Beat("b:1", 22), Soon()));
  EXPECT_EQ(joined.primary(), "a:1");
  EXPECT_EQ(joined.epoch(), first.epoch());
  EXPECT_EQ(joined.in_sync_size(), 1);
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView again,
                       a->Heartbeat(Beat("a:1", 11), Soon()));
  EXPECT_EQ(again.epoch(), first.epoch());
  // Only the primary of the epoch reports, and never itself.
  proto::ReplicaReport by_b =
      Report(joined, "a:1", proto::ReplicaReport::FAILED);
  by_b.set_primary("b:1");
  EXPECT_TRUE(absl::IsFailedPrecondition(b->Report(by_b, Soon()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      a->Report(Report(first, "a:1", proto::ReplicaReport::FAILED), Soon())
          .status()));
  EXPECT_TRUE(absl::IsNotFound(
      a->Report(Report(first, "nobody:1", proto::ReplicaReport::IN_SYNC),
                Soon())
          .status()));
  ASSERT_OK_AND_ASSIGN(
      proto::ReplicaView synced,
      a->Report(Report(first, "b:1", proto::ReplicaReport::IN_SYNC), Soon()));
  EXPECT_EQ(synced.in_sync_size(), 2);

  // The primary stops renewing its lease: the in-sync backup takes over
  // in a later epoch, same lineage, alone in sync.
  ExpireLease(cluster, "a:1");
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView failed_over,
                       b->Heartbeat(Beat("b:1", 22), Soon()));
  EXPECT_EQ(failed_over.primary(), "b:1");
  EXPECT_GT(failed_over.epoch(), first.epoch());
  EXPECT_EQ(failed_over.lineage(), first.lineage());
  ASSERT_EQ(failed_over.in_sync_size(), 1);
  EXPECT_EQ(failed_over.in_sync(0), "b:1");
  // The old primary, back, sees the new epoch (its Replicator leaves), and
  // its reports for the old epoch are refused.
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView seen_by_a,
                       a->Heartbeat(Beat("a:1", 11), Soon()));
  EXPECT_EQ(seen_by_a.primary(), "b:1");
  EXPECT_EQ(seen_by_a.epoch(), failed_over.epoch());
  EXPECT_TRUE(absl::IsFailedPrecondition(
      a->Report(Report(first, "b:1", proto::ReplicaReport::FAILED), Soon())
          .status()));
  // A restarted a (new incarnation) joins out of sync; reported in sync
  // and then failed, it leaves the set again.
  auto a2 = Directory(cluster);
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView rejoined,
                       a2->Heartbeat(Beat("a:1", 33), Soon()));
  EXPECT_EQ(rejoined.in_sync_size(), 1);
  ASSERT_OK(b->Report(Report(failed_over, "a:1", proto::ReplicaReport::IN_SYNC),
                      Soon())
                .status());
  ASSERT_OK_AND_ASSIGN(
      proto::ReplicaView dropped,
      b->Report(Report(failed_over, "a:1", proto::ReplicaReport::FAILED),
                Soon()));
  EXPECT_EQ(dropped.in_sync_size(), 1);
  // The primary restarts with no in-sync replica alive: nobody holds the
  // shard's data, so it starts a new lineage.
  auto b2 = Directory(cluster);
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView fresh,
                       b2->Heartbeat(Beat("b:1", 44), Soon()));
  EXPECT_EQ(fresh.primary(), "b:1");
  EXPECT_GT(fresh.epoch(), failed_over.epoch());
  EXPECT_NE(fresh.lineage(), first.lineage());
}

// A primary whose lease ends with no in-sync replica alive keeps the
// shard: nobody else has its writes, so the shard waits for it.
TEST_F(EtcdTest, AShardWithoutAnInSyncReplicaWaitsForItsPrimary) {
  const std::string cluster = "waits";
  auto a = Directory(cluster);
  auto b = Directory(cluster);
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView first,
                       a->Heartbeat(Beat("a:1", 1), Soon()));
  ASSERT_OK(b->Heartbeat(Beat("b:1", 2), Soon()).status());  // not in sync
  ExpireLease(cluster, "a:1");
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView waiting,
                       b->Heartbeat(Beat("b:1", 2), Soon()));
  EXPECT_EQ(waiting.primary(), "a:1");
  EXPECT_EQ(waiting.epoch(), first.epoch());
  // The same process back (a new lease): primary again, same epoch.
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView back,
                       a->Heartbeat(Beat("a:1", 1), Soon()));
  EXPECT_EQ(back.primary(), "a:1");
  EXPECT_EQ(back.epoch(), first.epoch());
}

TEST_F(EtcdTest, ClustersAndBadMembersAreKeptApart) {
  auto x = Directory("cluster-x");
  auto y = Directory("cluster-y");
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView vx,
                       x->Heartbeat(Beat("h:1", 1), Soon()));
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView vy,
                       y->Heartbeat(Beat("h:2", 2), Soon()));
  EXPECT_EQ(vx.primary(), "h:1");
  EXPECT_EQ(vy.primary(), "h:2");
  EXPECT_TRUE(absl::IsNotFound(Directory("cluster-z")->View(0).status()));
  for (const proto::HeartbeatRequest& bad :
       {Beat("", 1), Beat("h:1", 0), Beat("../members/h:1", 1)}) {
    EXPECT_TRUE(absl::IsInvalidArgument(x->Heartbeat(bad, Soon()).status()))
        << bad.DebugString();
  }
}

// With one member of three down, the directory works; with two down
// (no quorum), a heartbeat fails (UNAVAILABLE: no lease is renewed, so a
// primary stops writing) and works again once one member is back.
TEST_F(EtcdTest, OneMemberDownChangesNothingTwoStopTheDirectory) {
  const std::string cluster = "quorum";
  auto a = Directory(cluster);
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView first,
                       a->Heartbeat(Beat("a:1", 1), Soon()));
  cluster_->Kill(0);
  ASSERT_OK_AND_ASSIGN(proto::ReplicaView one_down,
                       a->Heartbeat(Beat("a:1", 1), Soon()));
  EXPECT_EQ(one_down.epoch(), first.epoch());
  cluster_->Kill(1);
  const absl::StatusOr<proto::ReplicaView> no_quorum =
      a->Heartbeat(Beat("a:1", 1), Soon());
  EXPECT_FALSE(no_quorum.ok());
  ASSERT_OK(cluster_->Restart(0));
  absl::StatusOr<proto::ReplicaView> back;
  for (int i = 0; i < 50 && !back.ok(); ++i) {
    back = a->Heartbeat(Beat("a:1", 1), Soon());
    if (!back.ok()) absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_OK(back.status());
  EXPECT_EQ(back->primary(), "a:1");
  ASSERT_OK(cluster_->Restart(1));
}

// The workers' rendezvous in etcd: keys set, read and waited for, named
// when they never come, and gone with the worker that set them.
TEST_F(EtcdTest, WorkersMeetInEtcdAndTheirKeysGoWithThem) {
  ASSERT_OK_AND_ASSIGN(
      auto rank0, worker::EtcdStore::Create(ClientOf(cluster_->endpoints()),
                                            absl::Seconds(5)));
  ASSERT_OK_AND_ASSIGN(
      auto rank1, worker::EtcdStore::Create(ClientOf(cluster_->endpoints()),
                                            absl::Seconds(5)));
  ASSERT_OK(rank0->Set("job/gloo/0", "addr0"));
  EXPECT_TRUE(absl::IsNotFound(rank1->Get("job/gloo/1").status()));
  const absl::Status late =
      rank1->Wait({"job/gloo/0", "job/gloo/1"}, absl::Milliseconds(200));
  EXPECT_TRUE(absl::IsDeadlineExceeded(late)) << late;
  EXPECT_TRUE(absl::StrContains(late.message(), "job/gloo/1")) << late;
  EXPECT_FALSE(absl::StrContains(late.message(), "job/gloo/0")) << late;
  ASSERT_OK(rank1->Set("job/gloo/1", std::string("a\0b", 3)));
  ASSERT_OK(rank0->Wait({"job/gloo/0", "job/gloo/1"}, absl::Seconds(5)));
  ASSERT_OK_AND_ASSIGN(const std::string value, rank0->Get("job/gloo/1"));
  EXPECT_EQ(value, std::string("a\0b", 3));
  // A worker that ends takes its keys along (its lease is revoked).
  rank1.reset();
  EXPECT_TRUE(absl::IsNotFound(rank0->Get("job/gloo/1").status()));
  ASSERT_OK(rank0->Get("job/gloo/0").status());
}

// etcds://: TLS with the servers' PEM files; a certificate of another CA
// is refused.
TEST(EtcdTlsTest, TalksTlsWithTheSamePemFiles) {
  const std::string certs = absl::StrCat(std::getenv("TEST_TMPDIR"), "/certs");
  const std::string command =
      absl::StrCat("security/make_certs.sh ", certs, " >/dev/null");
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  ASSERT_OK_AND_ASSIGN(auto cluster, EtcdCluster::Start(1, certs));
  EtcdOptions options;
  options.endpoints = cluster->endpoints();
  ASSERT_TRUE(absl::StartsWith(options.endpoints, "etcds://"));
  options.security.ca_file = certs + "/ca.pem";
  options.security.cert_file = certs + "/node.pem";
  options.security.key_file = certs + "/node.key";
  ASSERT_OK_AND_ASSIGN(auto etcd, EtcdClient::Create(options));
  ASSERT_OK(etcd->Put("/tls", "yes").status());
  ASSERT_OK_AND_ASSIGN(control::EtcdRange range, etcd->Get("/tls"));
  ASSERT_EQ(range.kvs.size(), 1u);
  EXPECT_EQ(range.kvs[0].value, "yes");
  // A client whose certificate another CA signed; one trusting another CA.
  EtcdOptions stranger = options;
  stranger.security.cert_file = certs + "/other.pem";
  stranger.security.key_file = certs + "/other.key";
  ASSERT_OK_AND_ASSIGN(auto refused, EtcdClient::Create(stranger));
  EXPECT_FALSE(refused->Get("/tls").ok());
  EtcdOptions distrusting = options;
  distrusting.security.ca_file = certs + "/other-ca.pem";
  ASSERT_OK_AND_ASSIGN(auto distrusts, EtcdClient::Create(distrusting));
  EXPECT_TRUE(absl::IsUnavailable(distrusts->Get("/tls").status()));
}

}  // namespace
}  // namespace embedps
