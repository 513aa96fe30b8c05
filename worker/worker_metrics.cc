#include "worker/worker_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/metrics_http.h"
#include "httplib.h"

namespace embedps::worker {
std::string WorkerMetrics::Render() const {
  struct Row {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Row rows[] = {
      {"embedps_worker_steps_total", "counter", "training steps completed",
       static_cast<double>(steps.load())},
      {"embedps_worker_planned_steps", "gauge", "steps this job will run",
       static_cast<double>(total_steps.load())},
      {"embedps_worker_samples_total", "counter",
       "samples trained on by this worker",
       static_cast<double>(samples.load())},
      {"embedps_worker_bad_lines_total", "counter",
       "malformed data lines skipped", static_cast<double>(bad_lines.load())},
      {"embedps_worker_publications_total", "counter",
       "publications of the tables to serving replicas (rank 0)",
       static_cast<double>(publications.load())},
      {"embedps_worker_pull_wait_seconds_total", "counter",
       "time spent waiting for embedding Pulls", pull_wait_seconds.load()},
      {"embedps_worker_compute_seconds_total", "counter",
       "time in forward, backward, dense allreduce and optimizer",
       compute_seconds.load()},
      {"embedps_worker_push_seconds_total", "counter",
       "time spent waiting for embedding Pushes", push_seconds.load()},
      {"embedps_worker_train_loss", "gauge",
       "mean training loss over the last logged steps", train_loss.load()},
      {"embedps_worker_train_auc", "gauge",
       "AUC over the most recent training predictions", train_auc.load()},
      {"embedps_worker_test_auc", "gauge",
       "test AUC of the last evaluation (rank 0)", test_auc.load()},
      {"embedps_worker_test_logloss", "gauge",
       "test log loss of the last evaluation (rank 0)", test_logloss.load()},
  };
  std::string out;
  for (const Row& r : rows) {
    absl::StrAppendFormat(
        &out, "# HELP %s %s\n# TYPE %s %s\n%s{rank=\"%d\"} %.9g\n", r.name,
        r.help, r.name, r.type, r.name, rank, r.value);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const WorkerMetrics* metrics, const std::string& host, int port) {
  std::unique_ptr<MetricsEndpoint> endpoint(new MetricsEndpoint());
  endpoint->http_ = std::make_unique<httplib::Server>();
  LimitIdleConnections(*endpoint->http_);
  endpoint->http_->Get(
      "/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics->Render(), "text/plain; version=0.0.4");
      });
  endpoint->port_ =
      port == 0 ? endpoint->http_->bind_to_any_port(host)
                : (endpoint->http_->bind_to_port(host, port) ? port : -1);
  if (endpoint->port_ < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port));
  }
  httplib::Server* http = endpoint->http_.get();
  endpoint->thread_ = std::thread([http] { http->listen_after_bind(); });
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace embedps::worker
