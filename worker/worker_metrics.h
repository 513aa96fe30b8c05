// WorkerMetrics: what a training worker exposes while it runs — Prometheus
// text on /metrics (cpp-httplib), and the time split of its steps that the
// summary reports.
//
// Thread safety: the fields are atomics, written by the training thread
// and read by the HTTP thread.
#ifndef EMBEDPS_WORKER_WORKER_METRICS_H_
#define EMBEDPS_WORKER_WORKER_METRICS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace httplib {
class Server;
}

namespace embedps::worker {

struct WorkerMetrics {
  int rank = 0;
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> total_steps{0};
  std::atomic<int64_t> samples{0};
  std::atomic<int64_t> bad_lines{0};
  // Publications to serving replicas (rank 0).
  std::atomic<int64_t> publications{0};
  // Seconds this worker spent waiting for Pulls, computing (forward,
  // backward, dense allreduce and optimizer), and pushing.
  std::atomic<double> pull_wait_seconds{0};
  std::atomic<double> compute_seconds{0};
  std::atomic<double> push_seconds{0};
  std::atomic<double> train_loss{0};  // mean over the last logged steps
  std::atomic<double> train_auc{0};   // over the recent predictions
  std::atomic<double> test_auc{0};    // last evaluation (rank 0)
  std::atomic<double> test_logloss{0};

  // Prometheus text exposition format.
  std::string Render() const;
};

// Serves `metrics` on http://host:port/metrics from its own thread until
// destroyed. Port 0 picks a free port (see port()).
class MetricsEndpoint {
 public:
  // UNAVAILABLE if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const WorkerMetrics* metrics, const std::string& host, int port);
  ~MetricsEndpoint();
  int port() const { return port_; }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = -1;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_WORKER_METRICS_H_
