#include "worker/job_data.h"

#include <string>
#include <utility>
#include <vector>

#include "common/status_macros.h"
#include "config/dlrm_config.h"
#include "data/line_reader.h"

namespace embedps::worker {

data::SchemaBatch BagsOf(const data::CriteoBatch& batch) {
  data::SchemaBatch bags;
  bags.step = batch.step;
  bags.size = batch.size;
  bags.labels = batch.labels;
  bags.dense = batch.dense;
  bags.slots.resize(data::kCriteoSlots);
  for (int s = 0; s < data::kCriteoSlots; ++s) {
    data::SchemaBatch::Bags& slot = bags.slots[s];
    slot.keys.resize(batch.size);
    slot.offsets.resize(batch.size + 1);
    for (int i = 0; i < batch.size; ++i) {
      slot.keys[i] =
          batch.keys[static_cast<size_t>(i) * data::kCriteoSlots + s];
      slot.offsets[i + 1] = i + 1;
    }
  }
  return bags;
}

absl::StatusOr<std::optional<data::FeatureSchema>> JobData::PrepareSchema(
    const config::WorkerConfig& config) {
  if (!config.has_schema()) return std::optional<data::FeatureSchema>();
  const std::vector<std::string> files(config.train_files().begin(),
                                       config.train_files().end());
  absl::StatusOr<data::FeatureSchema> schema = data::PrepareFeatureSchema(
      config::FeatureSchemaSpecOf(config.schema()), files,
      config.schema().statistics_lines() > 0
          ? config.schema().statistics_lines()
          : 100000);
  if (!schema.ok()) {
    return absl::Status(schema.status().code(),
                        absl::StrCat("schema: ", schema.status().message()));
  }
  return std::optional<data::FeatureSchema>(*std::move(schema));
}

absl::StatusOr<std::unique_ptr<JobData>> JobData::Open(
    data::BatchReaderOptions options,
    const std::optional<data::FeatureSchema>& schema) {
  auto data = std::unique_ptr<JobData>(new JobData());
  if (!schema.has_value()) {
    ASSIGN_OR_RETURN(data->criteo_, data::CriteoReader::Open(options));
    return data;
  }
  options.header = schema->header;
  // Test files must have the training files' columns.
  RETURN_IF_ERROR(data::CheckHeaders(*schema, options.files));
  ASSIGN_OR_RETURN(data->schema_, data::SchemaReader::Open(
                                      options, data::SchemaFormat(*schema)));
  return data;
}

absl::Status JobData::CheckReadable(
    const std::vector<std::string>& files,
    const std::optional<data::FeatureSchema>& schema) {
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(std::unique_ptr<data::LineReader> reader,
                     data::LineReader::Open(file, data::kMaxLineBytes));
    absl::string_view line;
    bool too_long = false;
    // The first bytes decode (a file named .gz that is not gzip, say).
    if (absl::StatusOr<bool> first = reader->Next(&line, &too_long);
        !first.ok()) {
      return data::MalformedFile(first.status());
    }
  }
  if (schema.has_value()) RETURN_IF_ERROR(data::CheckHeaders(*schema, files));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<data::SchemaBatch>> JobData::Next() {
  if (schema_ != nullptr) return schema_->Next();
  ASSIGN_OR_RETURN(std::optional<data::CriteoBatch> batch, criteo_->Next());
  if (!batch.has_value()) return std::optional<data::SchemaBatch>();
  return std::optional<data::SchemaBatch>(BagsOf(*batch));
}

int64_t JobData::total_steps() const {
  return schema_ != nullptr ? schema_->total_steps() : criteo_->total_steps();
}

data::BatchReaderStats JobData::stats() const {
  return schema_ != nullptr ? schema_->stats() : criteo_->stats();
}

int64_t JobData::values_dropped() const {
  return schema_ != nullptr ? schema_->format().values_dropped() : 0;
}

}  // namespace embedps::worker
