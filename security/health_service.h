// HealthService: grpc.health.v1.Health for one of our server processes
// (ps_server, ps_predictor), open to callers without a token (probes,
// load balancers).
//
// Check: SERVING for the server as a whole (service "") while it serves,
// NOT_SERVING once it shuts down; NOT_FOUND for any other service name.
// Watch: the same status at once and again on each change, for at most
// `max_watches` streams at a time and `max_watches_per_peer` of one peer
// host (wire/peer_host.h) — a caller past either gets RESOURCE_EXHAUSTED,
// so that streams nobody authenticated cannot pin the server's memory
// (gRPC's default service held ~14 KB a stream, without limit), nor one
// host take every place; a Watch of another name gets SERVICE_UNKNOWN.
// Watch streams end (OK) when the server shuts down.
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_SECURITY_HEALTH_SERVICE_H_
#define EMBEDPS_SECURITY_HEALTH_SERVICE_H_

#include <cstddef>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "proto/health.grpc.pb.h"

namespace embedps::security {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  static constexpr size_t kDefaultMaxWatches = 64;
  static constexpr size_t kDefaultMaxWatchesPerPeer = 8;
  explicit HealthService(
      size_t max_watches = kDefaultMaxWatches,
      size_t max_watches_per_peer = kDefaultMaxWatchesPerPeer)
      : max_watches_(max_watches),
        max_watches_per_peer_(max_watches_per_peer) {}

  // NOT_SERVING from now on (the process shuts down); every Watch is told
  // and ends.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request,
      grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  // Watch streams open now.
  size_t watches();

 private:
  class Watcher;
  friend class Watcher;
  void Remove(Watcher* watcher);

  const size_t max_watches_;
  const size_t max_watches_per_peer_;
  Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = true;
  absl::flat_hash_set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  // Open Watch streams by peer host.
  absl::flat_hash_map<std::string, size_t> per_peer_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedps::security

#endif  // EMBEDPS_SECURITY_HEALTH_SERVICE_H_
