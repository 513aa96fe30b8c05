// Fuzz target: the text-format configs a user writes — ps_server's
// --tables (a TableConfigList, each table turned into the engine's spec)
// and ps_worker's / ps_predictor's --config (a WorkerConfig, validated and
// turned into the dense model's spec and optimizer) — through the same
// functions the binaries call.
//
// Input: byte 0 picks the kind (even: tables, odd: worker config); the
// rest is the text.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/text_proto.h"
#include "config/dlrm_config.h"
#include "config/worker_config.pb.h"
#include "proto/tables.pb.h"
#include "server/table_config.h"

namespace embedps::fuzz {
namespace {

void Tables(const std::string& text) {
  proto::TableConfigList list;
  if (!ParseTextProto(text, "--tables", &list).ok()) return;
  for (const proto::TableConfig& config : list.table()) {
    absl::StatusOr<embedding::TableSpec> spec = server::SpecFromConfig(config);
    if (!spec.ok()) continue;
    // A spec accepted once is accepted again after its round trip.
    if (!server::SpecFromConfig(server::ConfigFromSpec(*spec)).ok()) {
      std::abort();
    }
  }
}

void Worker(const std::string& text) {
  config::WorkerConfig config;
  if (!ParseTextProto(text, "--config", &config).ok()) return;
  if (!config::ValidateWorkerConfig(config).ok()) return;
  (void)config::ModelSpecOf(config);
  (void)config::ParseMode(config.mode());
  (void)config::DenseOptimizerOf(config.dense_optimizer(), config.max_steps());
}

}  // namespace
}  // namespace embedps::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    embedps::fuzz::Tables(text);
  } else {
    embedps::fuzz::Worker(text);
  }
  return 0;
}
