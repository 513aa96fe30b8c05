// Translation between the wire's TableConfig and the engine's TableSpec.
//
// Unset optional fields take TableSpec's defaults, so a config names only
// what it changes. Thread safety: pure functions.
#ifndef EMBEDPS_SERVER_TABLE_CONFIG_H_
#define EMBEDPS_SERVER_TABLE_CONFIG_H_

#include <optional>

#include "absl/status/statusor.h"
#include "embedding/table_spec.h"
#include "proto/tables.pb.h"

namespace embedps::server {

// The spec `config` describes, validated (INVALID_ARGUMENT naming the
// field, or an enum value this server does not know).
absl::StatusOr<embedding::TableSpec> SpecFromConfig(
    const proto::TableConfig& config);

// The config that SpecFromConfig turns back into `spec`, with every field
// set explicitly.
proto::TableConfig ConfigFromSpec(const embedding::TableSpec& spec);

// The table a serving replica keeps for `config`: the same rows' values
// and no optimizer state (the optimizer made SGD, whose rows carry none;
// a replica never updates them); `storage`, when given, replaces the
// config's serving.storage (the replica's --serving_storage).
proto::TableConfig ValuesOnlyConfig(
    proto::TableConfig config,
    std::optional<proto::ServingConfig::Storage> storage = std::nullopt);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_TABLE_CONFIG_H_
