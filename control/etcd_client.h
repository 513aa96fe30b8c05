// EtcdClient: the part of etcd's v3 API that embedps's control plane uses
// (reads, writes and transactions on keys, leases), over etcd's own gRPC
// API (control/etcd_rpc.proto: the KV and Lease services). Our own code:
// no vendored etcd client. (etcd's JSON gateway was the other choice; its
// error answers end in HTTP trailers that cpp-httplib cannot read.)
//
// Endpoints: "etcd://host:port,host:port" (plain text) or
// "etcds://host:port,..." (TLS with the PEM files of the servers' own
// flags: the members' certificates must chain to security.ca_file;
// cert_file/key_file are shown for mutual TLS; server_name as for our
// servers). A call goes to the member that answered last and moves on to
// the next one when a member cannot be reached or has no quorum, so one
// member down changes nothing; UNAVAILABLE naming every member once none
// answered. etcd's other errors keep their gRPC code (e.g. NOT_FOUND for
// a lease that expired).
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_CONTROL_ETCD_CLIENT_H_
#define EMBEDPS_CONTROL_ETCD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "control/etcd_rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "security/credentials.h"

namespace embedps::control {

struct EtcdKeyValue {
  std::string key;
  std::string value;
  // The revision that created the key (0: absent), that last changed it.
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  // The lease the key is bound to (0: none).
  int64_t lease = 0;
};

// The keys a range found, read at one revision.
struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  int64_t revision = 0;
};

// One condition of a transaction.
struct EtcdCompare {
  enum class Target { kCreateRevision, kModRevision, kValue };
  std::string key;
  Target target = Target::kModRevision;
  int64_t revision = 0;  // kCreateRevision, kModRevision
  std::string value;     // kValue

  // The key does not exist.
  static EtcdCompare Absent(std::string key);
  // The key was last written at `revision` (0: absent).
  static EtcdCompare ModifiedAt(std::string key, int64_t revision);
};

// One write of a transaction.
struct EtcdWrite {
  std::string key;
  std::string value;
  int64_t lease = 0;
  bool erase = false;  // delete `key` instead of writing it

  static EtcdWrite Put(std::string key, std::string value, int64_t lease = 0);
  static EtcdWrite Delete(std::string key);
};

struct EtcdTxnResult {
  bool succeeded = false;
  // The store's revision after the transaction (its writes' revision when
  // it succeeded and wrote).
  int64_t revision = 0;
};

struct EtcdLease {
  int64_t id = 0;
  // Seconds, as granted (etcd may raise a small request to its minimum).
  int64_t ttl_seconds = 0;
};

struct EtcdOptions {
  // "etcd://host:port,..." or "etcds://host:port,...".
  std::string endpoints;
  // TLS files for etcds:// (ca_file required there; token_file is not
  // used: etcd has its own authentication).
  security::ChannelSecurity security;
  // Per request and member. Default: 2 s.
  absl::Duration timeout = absl::Seconds(2);
};

class EtcdClient {
 public:
  // INVALID_ARGUMENT for endpoints that are not etcd:// or etcds:// with at
  // least one host:port, or etcds:// without a CA file.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(
      EtcdOptions options);

  // The key `key`, or every key starting with it when `prefix`.
  absl::StatusOr<EtcdRange> Get(const std::string& key, bool prefix = false);
  // Returns the revision of the write.
  absl::StatusOr<int64_t> Put(const std::string& key, const std::string& value,
                              int64_t lease = 0);
  // All of `success` when every compare holds, else all of `failure`.
  absl::StatusOr<EtcdTxnResult> Txn(const std::vector<EtcdCompare>& compares,
                                    const std::vector<EtcdWrite>& success,
                                    const std::vector<EtcdWrite>& failure = {});
  absl::StatusOr<EtcdLease> Grant(int64_t ttl_seconds);
  // The lease's remaining TTL in seconds after the renewal; 0 when it has
  // expired (or never existed).
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  // The TTL the lease was granted with, in seconds; NOT_FOUND once it has
  // expired.
  absl::StatusOr<int64_t> GrantedTtl(int64_t lease);
  // Ends a lease now; its keys are deleted. OK for one that expired.
  absl::Status Revoke(int64_t lease);

  // The endpoints as given, for messages.
  const std::string& endpoints() const { return options_.endpoints; }

 private:
  struct Member {
    std::string host;  // "host:port"
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  };
  EtcdClient(EtcdOptions options, std::vector<Member> members)
      : options_(std::move(options)), members_(std::move(members)) {}

  // Runs `rpc` on the members in turn (the last good one first) until one
  // answers; `what` names the call in errors.
  absl::Status Call(
      const char* what,
      const std::function<grpc::Status(Member&, grpc::ClientContext&)>& rpc);

  const EtcdOptions options_;
  std::vector<Member> members_;
  Mutex mu_;
  size_t preferred_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace embedps::control

#endif  // EMBEDPS_CONTROL_ETCD_CLIENT_H_
