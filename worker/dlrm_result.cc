// The DLRM job's results: the Bayes-optimal metrics it is compared with,
// and its summary as JSON.
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "dense/model.h"
#include "nlohmann/json.hpp"
#include "worker/dlrm_job.h"

namespace embedps::worker {

absl::Status ReadBayesMetrics(const std::string& path, DlrmJobResult& result) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read bayes_metrics_file '", path, "'"));
  }
  const nlohmann::json meta = nlohmann::json::parse(in, nullptr, false);
  if (meta.is_discarded() || !meta.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bayes_metrics_file '", path, "' is not a JSON object"));
  }
  result.bayes_test_auc = meta.value("bayes_test_auc", 0.0);
  result.bayes_test_logloss = meta.value("bayes_test_logloss", 0.0);
  return absl::OkStatus();
}

std::string DlrmJobResultJson(const DlrmJobOptions& o, const DlrmJobResult& r) {
  nlohmann::ordered_json evals = nlohmann::ordered_json::array();
  for (const EvalPoint& e : r.evals) {
    evals.push_back({{"step", e.step}, {"auc", e.auc}, {"logloss", e.logloss}});
  }
  const EvalPoint last = r.evals.empty() ? EvalPoint() : r.evals.back();
  const nlohmann::ordered_json json = {
      {"model", "dlrm"},
      {"mode", o.config.mode().empty() ? "sync" : o.config.mode()},
      {"workers", o.job.world_size},
      {"servers", o.servers.size()},
      {"device", dense::BackendName(o.model.backend)},
      {"steps", r.steps},
      {"samples", r.samples * o.job.world_size},
      {"train_seconds", r.train_seconds},
      {"samples_per_second", r.samples_per_second},
      {"final_train_loss", r.final_train_loss},
      {"test_auc", last.auc},
      {"test_logloss", last.logloss},
      {"bayes_test_auc", r.bayes_test_auc},
      {"bayes_test_logloss", r.bayes_test_logloss},
      {"bad_lines", r.bad_lines},
      {"parse_lines_per_second", r.parse_lines_per_second},
      {"pull_wait_seconds", r.pull_wait_seconds},
      {"compute_seconds", r.compute_seconds},
      {"push_seconds", r.push_seconds},
      {"read_seconds", r.read_seconds},
      {"prepare_seconds", r.prepare_seconds},
      {"prepare_wait_seconds", r.prepare_wait_seconds},
      {"keys_per_sample",
       r.samples > 0 ? static_cast<double>(r.keys) / r.samples : 0.0},
      {"keys_pulled_per_sample",
       r.samples > 0 ? static_cast<double>(r.keys_pulled) / r.samples : 0.0},
      {"keys_hot_per_sample",
       r.samples > 0 ? static_cast<double>(r.keys_hot) / r.samples : 0.0},
      {"hot_rows", r.hot_rows},
      {"hot_rows_seconds", r.hot_rows_seconds},
      {"flops_per_sample", r.flops_per_sample},
      {"start_step", r.start_step},
      {"restored_from", r.restored_from},
      {"checkpoints", r.checkpoints},
      {"checkpoint_pause_max_seconds", r.checkpoint_pause_max_seconds},
      {"checkpoint_pause_total_seconds", r.checkpoint_pause_total_seconds},
      {"last_checkpoint", r.last_checkpoint},
      {"publications", r.publications},
      {"last_published_step", r.last_published_step},
      {"table_rows", r.table_rows},
      {"rows_evicted", r.rows_evicted},
      {"evals", evals},
  };
  return json.dump();
}

}  // namespace embedps::worker
