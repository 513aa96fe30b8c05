// Fuzz target: a feature schema (data/feature_schema.h) resolved against
// a header line and a data line parsed with it, as the schema reader
// calls them on the files' bytes.
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "data/feature_schema.h"

namespace {

// Every kind of column: a label, two dense transforms, hex, text and
// weighted decimal ids, by name.
embedps::data::FeatureSchemaSpec Spec() {
  using embedps::data::DenseTransform;
  using embedps::data::FeatureSchemaSpec;
  using embedps::data::IdFormat;
  FeatureSchemaSpec spec;
  spec.header = true;
  spec.label = "label";
  spec.dense = {{"count", DenseTransform::kLog1p},
                {"price", DenseTransform::kStandardize}};
  FeatureSchemaSpec::Sparse hex{"ad"};
  hex.id_format = IdFormat::kHex;
  FeatureSchemaSpec::Sparse history{"history"};
  history.multi_valued = true;
  history.max_values = 4;
  FeatureSchemaSpec::Sparse tags{"tags"};
  tags.multi_valued = true;
  tags.weighted = true;
  tags.id_format = IdFormat::kDecimal;
  spec.sparse = {hex, history, tags};
  return spec;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first line is the header, the rest one data line; each in a
  // buffer of its own so that reads past its end are visible to ASAN.
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string header(input.substr(0, newline));
  const std::string line(newline == absl::string_view::npos
                             ? absl::string_view()
                             : input.substr(newline + 1));
  static const embedps::data::FeatureSchemaSpec spec = Spec();
  absl::StatusOr<embedps::data::FeatureSchema> schema =
      embedps::data::ResolveFeatureSchema(spec, header);
  if (!schema.ok()) {
    schema = embedps::data::ResolveFeatureSchema(
        spec, "label\tcount\tprice\tad\thistory\ttags");
  }
  embedps::data::DenseStatistics statistics(*schema);
  statistics.Add(line);
  statistics.Apply(&*schema);
  embedps::data::SchemaBatch batch;
  batch.Reset(*schema);
  (void)embedps::data::ParseSchemaLine(*schema, line, &batch);
  return 0;
}
