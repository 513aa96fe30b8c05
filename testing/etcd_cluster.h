// Test helper: a real etcd cluster of N members on loopback, started and
// stopped by the test (Debian's etcd-server; deploy/setup.sh installs it).
//
// Each member gets two free ports (client, peer) and a data directory
// under the test's temporary directory. Start waits until every member
// reports itself healthy. Kill and Restart act on one member (a restart
// keeps its data directory and rejoins the cluster). The destructor stops
// every member; none is ever left behind (ChildProcess).
// Thread safety: one thread at a time.
#ifndef EMBEDPS_TESTING_ETCD_CLUSTER_H_
#define EMBEDPS_TESTING_ETCD_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "testing/child_process.h"

namespace embedps::testing {

class EtcdCluster {
 public:
  // NOT_FOUND naming deploy/setup.sh when no etcd binary is installed;
  // DEADLINE_EXCEEDED when the members are not healthy within 30 s.
  // `tls_dir` (security/make_certs.sh's output): clients must speak TLS
  // and show a certificate of its CA (node.pem); endpoints() is etcds://.
  static absl::StatusOr<std::unique_ptr<EtcdCluster>> Start(
      int members, const std::string& tls_dir = "");
  ~EtcdCluster();

  // "etcd://127.0.0.1:P1,127.0.0.1:P2,..." (every member).
  std::string endpoints() const;
  // "127.0.0.1:P" of member i's client port.
  const std::string& client_address(int i) const;

  // SIGKILL to member i (no-op if it is down).
  void Kill(int i);
  // Starts member i again with its data; waits until it is healthy.
  absl::Status Restart(int i);
  // Kills every member, then starts them all again with their data (no
  // member alone could become healthy); waits until all are.
  absl::Status RestartAll();
  bool running(int i) const;

 private:
  struct Member {
    std::string name, client, peer, data_dir, log;
    std::unique_ptr<ChildProcess> process;
  };
  EtcdCluster() = default;
  absl::Status Spawn(int i, bool existing);
  absl::Status WaitHealthy(int i, absl::Duration timeout);

  std::string binary_;
  std::string tls_dir_;
  std::string initial_cluster_;
  std::vector<Member> members_;
};

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_ETCD_CLUSTER_H_
