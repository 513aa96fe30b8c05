// The DLRM job's configuration (config/worker_config.proto): its checks
// against the Criteo format and itself, and its translation into the specs
// of the parts (consistency mode, dense optimizer, model).
//
// Thread safety: pure functions.
#ifndef EMBEDPS_CONFIG_DLRM_CONFIG_H_
#define EMBEDPS_CONFIG_DLRM_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/worker_config.pb.h"
#include "data/feature_schema.h"
#include "dense/dense_optimizer.h"
#include "dense/model_spec.h"
#include "proto/tables.pb.h"

namespace embedps::config {

// A consistency mode as WorkerConfig.mode spells it: async, sync, ssp:N.
struct Mode {
  proto::ConsistencyConfig::Mode mode = proto::ConsistencyConfig::SYNC;
  uint32_t staleness = 0;
};
// INVALID_ARGUMENT for another spelling; empty is sync.
absl::StatusOr<Mode> ParseMode(const std::string& text);

// The dense optimizer of `config` over `total_steps` (for the decay).
absl::StatusOr<dense::DenseOptimizerSpec> DenseOptimizerOf(
    const DenseOptimizerConfig& config, int64_t total_steps);

// The dense model of `config`: Criteo's 13 dense features and one pooled
// slot per categorical column, or the schema's dense and sparse columns
// (a weighted column's bag is the sum of its rows scaled by their
// weights).
dense::ModelSpec ModelSpecOf(const WorkerConfig& config);

// The schema of `schema` as the data readers take it (columns still by
// name or position; data::PrepareFeatureSchema resolves them).
data::FeatureSchemaSpec FeatureSchemaSpecOf(const FeatureSchema& schema);

// The table of each slot, in slot order: `slot`'s, or the schema's sparse
// columns'.
std::vector<std::string> SlotTables(const WorkerConfig& config);

// Validates the configuration against the Criteo format and itself.
// INVALID_ARGUMENT naming the field.
absl::Status ValidateWorkerConfig(const WorkerConfig& config);

}  // namespace embedps::config

#endif  // EMBEDPS_CONFIG_DLRM_CONFIG_H_
