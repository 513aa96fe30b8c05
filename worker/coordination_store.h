// A dense::Store over a running cluster's Coordination service, so that
// the workers' collectives (Gloo addresses, NCCL unique ids) meet through
// shard 0 of the parameter servers. Lives in worker/ because it joins the
// client library and the dense half, which know nothing of each other.
// Thread safety: thread-safe.
#ifndef EMBEDPS_WORKER_COORDINATION_STORE_H_
#define EMBEDPS_WORKER_COORDINATION_STORE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/coordination_client.h"
#include "dense/collective/store.h"

namespace embedps::worker {

class CoordinationStore final : public dense::Store {
 public:
  // `client`: of the server hosting the store (shard 0).
  explicit CoordinationStore(std::unique_ptr<client::CoordinationClient> client)
      : client_(std::move(client)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    return client_->Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key) override {
    return client_->Get(key);
  }
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override {
    return client_->Wait(keys, timeout).status();
  }

 private:
  std::unique_ptr<client::CoordinationClient> client_;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_COORDINATION_STORE_H_
