// Store: the small key-value rendezvous that collective backends use to
// find each other (Gloo's addresses, NCCL's unique id).
//
// Implementations: InMemoryStore (ranks as threads of one process), and
// one over the Coordination service of a running cluster (in worker/, so
// that dense/ knows no servers).
// Thread safety: implementations are thread-safe.
#ifndef EMBEDPS_DENSE_COLLECTIVE_STORE_H_
#define EMBEDPS_DENSE_COLLECTIVE_STORE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace embedps::dense {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // NOT_FOUND if the key is not set.
  virtual absl::StatusOr<std::string> Get(const std::string& key) = 0;
  // Returns once every key is set; DEADLINE_EXCEEDED naming the missing
  // keys after `timeout`.
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            absl::Duration timeout) = 0;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_COLLECTIVE_STORE_H_
