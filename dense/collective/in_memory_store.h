// InMemoryStore: a Store inside one process, for ranks that are threads
// (tests, single-machine runs without a cluster).
// Thread safety: thread-safe.
#ifndef EMBEDPS_DENSE_COLLECTIVE_IN_MEMORY_STORE_H_
#define EMBEDPS_DENSE_COLLECTIVE_IN_MEMORY_STORE_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "dense/collective/store.h"

namespace embedps::dense {

class InMemoryStore final : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    absl::Duration timeout) override;

 private:
  Mutex mu_;
  CondVar changed_;
  absl::flat_hash_map<std::string, std::string> values_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_COLLECTIVE_IN_MEMORY_STORE_H_
