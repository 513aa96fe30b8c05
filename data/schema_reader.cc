#include "data/schema_reader.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "data/line_reader.h"

namespace embedps::data {
namespace {

// The first line of `path` ("" for an empty file).
absl::StatusOr<std::string> FirstLine(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader,
                   LineReader::Open(path, kMaxLineBytes));
  absl::string_view line;
  bool too_long = false;
  ASSIGN_OR_RETURN(const bool any, reader->Next(&line, &too_long));
  if (too_long) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the header row is longer than 1 MiB"));
  }
  std::string first = any ? std::string(line) : std::string();
  if (!first.empty() && first.back() == '\r') first.pop_back();
  return first;
}

}  // namespace

absl::Status CheckHeaders(const FeatureSchema& schema,
                          const std::vector<std::string>& files) {
  if (!schema.header) return absl::OkStatus();
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(const std::string header, FirstLine(file));
    if (header != schema.header_line) {
      return absl::InvalidArgumentError(absl::StrCat(
          file, ": its header row '", absl::CEscape(header.substr(0, 200)),
          "' is not the schema's ('",
          absl::CEscape(schema.header_line.substr(0, 200)), "')"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FeatureSchema> PrepareFeatureSchema(
    const FeatureSchemaSpec& spec, const std::vector<std::string>& files,
    int64_t statistics_lines) {
  if (files.empty()) return absl::InvalidArgumentError("no data files given");
  std::optional<std::string> header;
  if (spec.header) {
    ASSIGN_OR_RETURN(header, FirstLine(files[0]));
  }
  ASSIGN_OR_RETURN(FeatureSchema schema, ResolveFeatureSchema(spec, header));
  RETURN_IF_ERROR(CheckHeaders(schema, files));
  bool standardized = false;
  for (const FeatureSchema::Dense& d : schema.dense) {
    standardized = standardized || d.transform == DenseTransform::kStandardize;
  }
  if (!standardized) return schema;
  DenseStatistics statistics(schema);
  int64_t read = 0;
  for (const std::string& path : files) {
    if (read >= statistics_lines) break;
    ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader,
                     LineReader::Open(path, kMaxLineBytes));
    absl::string_view line;
    bool too_long = false;
    for (int64_t in_file = 0; read < statistics_lines; ++in_file) {
      absl::StatusOr<bool> more = reader->Next(&line, &too_long);
      if (!more.ok() || !*more) break;  // the reader reports damage later
      if (spec.header && in_file == 0) continue;
      if (!too_long) statistics.Add(line);
      ++read;
    }
  }
  statistics.Apply(&schema);
  return schema;
}

void SchemaFormat::Reset(SchemaBatch* batch, int64_t step, int capacity) const {
  batch->Reset(schema_);
  batch->step = step;
  batch->labels.reserve(capacity);
  batch->dense.reserve(static_cast<size_t>(capacity) * schema_.dense.size());
}

absl::Status SchemaFormat::Parse(absl::string_view line,
                                 SchemaBatch* batch) const {
  ParseCounts counts;
  RETURN_IF_ERROR(ParseSchemaLine(schema_, line, batch, &counts));
  if (counts.values_dropped != 0) *dropped_ += counts.values_dropped;
  return absl::OkStatus();
}

}  // namespace embedps::data
