// SchemaReader: a BatchReader (batch_reader.h) of files whose columns a
// FeatureSchema describes (feature_schema.h): TSV or CSV, with or without
// a header row, plain or gzip.
//
//   FeatureSchema schema = PrepareFeatureSchema(spec, train_files, 100000);
//   SchemaReader::Open(options, SchemaFormat(schema))  // train and test
//
// The schema is prepared once from the training files (their header, the
// STANDARDIZE statistics) and used as it is for the test files, so that
// both are read alike.
//
// Thread safety: as BatchReader; values_dropped() from any thread.
#ifndef EMBEDPS_DATA_SCHEMA_READER_H_
#define EMBEDPS_DATA_SCHEMA_READER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/batch_reader.h"
#include "data/feature_schema.h"

namespace embedps::data {

// Resolves `spec` against the first line of `files[0]` (with spec.header;
// every other file's first line must be the same: CheckHeaders) and sets
// the STANDARDIZE columns' statistics from the first `statistics_lines`
// samples of the files.
absl::StatusOr<FeatureSchema> PrepareFeatureSchema(
    const FeatureSchemaSpec& spec, const std::vector<std::string>& files,
    int64_t statistics_lines);

// INVALID_ARGUMENT naming the first of `files` whose header row is not
// the one `schema` was resolved against (schema.header_line), or OK (also
// for a schema without header rows).
absl::Status CheckHeaders(const FeatureSchema& schema,
                          const std::vector<std::string>& files);

class SchemaFormat {
 public:
  using Batch = SchemaBatch;
  explicit SchemaFormat(FeatureSchema schema)
      : schema_(std::move(schema)),
        dropped_(std::make_shared<std::atomic<int64_t>>(0)) {}
  SchemaFormat() : SchemaFormat(FeatureSchema()) {}

  void Reset(SchemaBatch* batch, int64_t step, int capacity) const;
  absl::Status Parse(absl::string_view line, SchemaBatch* batch) const;
  void Finish(SchemaBatch*) const {}

  const FeatureSchema& schema() const { return schema_; }
  // Ids left out past their column's max_values so far.
  int64_t values_dropped() const { return dropped_->load(); }

 private:
  FeatureSchema schema_;
  std::shared_ptr<std::atomic<int64_t>> dropped_;
};

using SchemaReader = BatchReader<SchemaFormat>;

}  // namespace embedps::data

#endif  // EMBEDPS_DATA_SCHEMA_READER_H_
