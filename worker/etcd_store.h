// A dense::Store in etcd (ps_worker/dense_worker --control_plane), so
// that the workers of a job meet without any process of ours hosting the
// rendezvous. Lives in worker/ because it joins the control plane's client
// and the dense half, which know nothing of each other.
//
// Keys are stored under /embedps/rendezvous/<key> (the collectives' keys
// begin with the job's name). Every key this store writes is bound to one
// etcd lease that the store keeps alive while it exists and revokes when
// destroyed: the keys are the job's membership, gone within the lease
// after a worker dies, so a later job of the same name never meets a
// dead one's addresses. Wait polls (every 20 ms).
// Thread safety: thread-safe.
#ifndef EMBEDPS_WORKER_ETCD_STORE_H_
#define EMBEDPS_WORKER_ETCD_STORE_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "control/etcd_client.h"
#include "dense/collective/store.h"

namespace embedps::worker {

class EtcdStore final : public dense::Store {
 public:
  // Grants the lease (`lease`, whole seconds, etcd's minimum at least);
  // UNAVAILABLE when etcd cannot be reached.
  static absl::StatusOr<std::unique_ptr<EtcdStore>> Create(
      std::unique_ptr<control::EtcdClient> etcd,
      absl::Duration lease = absl::Seconds(10));
  ~EtcdStore() override;

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

  // The etcd key a store key is kept at.
  static std::string EtcdKey(const std::string& key);

 private:
  EtcdStore(std::unique_ptr<control::EtcdClient> etcd, int64_t lease,
            absl::Duration ttl);
  void KeepAlive();

  const std::unique_ptr<control::EtcdClient> etcd_;
  const int64_t lease_;
  const absl::Duration ttl_;
  Mutex mu_;
  CondVar stop_cv_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread keepalive_;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_ETCD_STORE_H_
