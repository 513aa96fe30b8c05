// JobData: a DLRM job's training or test files as batches of bags —
// Criteo's layout (each categorical column a bag of one key) or the
// columns of the config's schema (data/schema_reader.h).
//
// Thread safety: as data::BatchReader (Next from one thread).
#ifndef EMBEDPS_WORKER_JOB_DATA_H_
#define EMBEDPS_WORKER_JOB_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config/worker_config.pb.h"
#include "data/batch_reader.h"
#include "data/criteo_reader.h"
#include "data/feature_schema.h"
#include "data/schema_reader.h"

namespace embedps::worker {

// A Criteo batch as bags: slot s's bag of sample i is its one key.
data::SchemaBatch BagsOf(const data::CriteoBatch& batch);

class JobData {
 public:
  // The schema of `config` prepared from its training files (their header
  // and statistics); nullopt for Criteo's layout. Every rank prepares the
  // same from the same files.
  static absl::StatusOr<std::optional<data::FeatureSchema>> PrepareSchema(
      const config::WorkerConfig& config);

  // Opens `options.files` in Criteo's layout (schema nullopt) or the
  // schema's (header rows as it says).
  static absl::StatusOr<std::unique_ptr<JobData>> Open(
      data::BatchReaderOptions options,
      const std::optional<data::FeatureSchema>& schema);

  // OK if each of `files` opens as a data file (present, readable, plain,
  // gzip or zstd) and, with a schema's header, begins with the schema's
  // header row; else the reader's error naming the file. What a job checks
  // of its test files before it trains: they are read at its first
  // evaluation, possibly at its end.
  static absl::Status CheckReadable(
      const std::vector<std::string>& files,
      const std::optional<data::FeatureSchema>& schema);

  absl::StatusOr<std::optional<data::SchemaBatch>> Next();
  int64_t total_steps() const;
  data::BatchReaderStats stats() const;
  // Ids left out past their column's max_values (schema only).
  int64_t values_dropped() const;

 private:
  std::unique_ptr<data::CriteoReader> criteo_;
  std::unique_ptr<data::SchemaReader> schema_;
};

}  // namespace embedps::worker

#endif  // EMBEDPS_WORKER_JOB_DATA_H_
