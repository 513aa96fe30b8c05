// The link between a job's feature schema and the input layout its model
// records (dense::InputLayout in dense/dense_model.proto): the header row
// the schema's column names were resolved against and the STANDARDIZE
// columns' statistics. A trainer records them in every dense parameters
// file it writes (checkpoints, publications, output_dir); a predictor
// resolves the schema from them without the training files, and a resumed
// job keeps the statistics its model was trained with.
#ifndef EMBEDPS_WORKER_INPUT_LAYOUT_H_
#define EMBEDPS_WORKER_INPUT_LAYOUT_H_

#include <optional>

#include "absl/status/statusor.h"
#include "data/feature_schema.h"
#include "dense/dense_model.pb.h"

namespace embedps::worker {

// What a model trained on `schema` records: its header row (with a
// header) and each STANDARDIZE column's name, mean and 1/std.
dense::InputLayout InputLayoutOf(const data::FeatureSchema& schema);

// Sets `schema`'s STANDARDIZE statistics to `layout`'s. FAILED_PRECONDITION
// naming both lists when `layout` does not standardize exactly `schema`'s
// STANDARDIZE columns (by name, in order); `schema` is then unchanged.
absl::Status UseRecordedStatistics(const dense::InputLayout& layout,
                                   data::FeatureSchema* schema);

// The schema `spec` resolves to with `layout`'s header and statistics;
// nullopt when the layout lacks what the spec needs (a header row for a
// header schema, statistics for STANDARDIZE columns: a model that
// recorded none). Errors as ResolveFeatureSchema's and
// UseRecordedStatistics'.
absl::StatusOr<std::optional<data::FeatureSchema>> SchemaOfModel(
    const data::FeatureSchemaSpec& spec, const dense::InputLayout& layout);

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_INPUT_LAYOUT_H_
