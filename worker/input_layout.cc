#include "worker/input_layout.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace embedps::worker {
namespace {

bool Standardized(const data::FeatureSchema::Dense& d) {
  return d.transform == data::DenseTransform::kStandardize;
}

}  // namespace

dense::InputLayout InputLayoutOf(const data::FeatureSchema& schema) {
  dense::InputLayout layout;
  if (schema.header) layout.set_header(schema.header_line);
  for (const data::FeatureSchema::Dense& d : schema.dense) {
    if (!Standardized(d)) continue;
    dense::InputLayout::Standardized* s = layout.add_standardized();
    s->set_column(d.name);
    s->set_mean(d.mean);
    s->set_inv_std(d.inv_std);
  }
  return layout;
}

absl::Status UseRecordedStatistics(const dense::InputLayout& layout,
                                   data::FeatureSchema* schema) {
  std::vector<std::string> wanted, recorded;
  for (const data::FeatureSchema::Dense& d : schema->dense) {
    if (Standardized(d)) wanted.push_back(d.name);
  }
  for (const dense::InputLayout::Standardized& s : layout.standardized()) {
    recorded.push_back(s.column());
  }
  if (wanted != recorded) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model was trained with STANDARDIZE columns [",
        absl::StrJoin(recorded, ", "), "]; this schema standardizes [",
        absl::StrJoin(wanted, ", "), "]"));
  }
  int next = 0;
  for (data::FeatureSchema::Dense& d : schema->dense) {
    if (!Standardized(d)) continue;
    d.mean = layout.standardized(next).mean();
    d.inv_std = layout.standardized(next).inv_std();
    ++next;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<data::FeatureSchema>> SchemaOfModel(
    const data::FeatureSchemaSpec& spec, const dense::InputLayout& layout) {
  bool standardizes = false;
  for (const data::FeatureSchemaSpec::Dense& d : spec.dense) {
    standardizes =
        standardizes || d.transform == data::DenseTransform::kStandardize;
  }
  if ((spec.header && layout.header().empty()) ||
      (standardizes && layout.standardized().empty())) {
    return std::optional<data::FeatureSchema>();
  }
  std::optional<absl::string_view> header;
  if (spec.header) header = layout.header();
  ASSIGN_OR_RETURN(data::FeatureSchema schema,
                   data::ResolveFeatureSchema(spec, header));
  RETURN_IF_ERROR(UseRecordedStatistics(layout, &schema));
  return std::optional<data::FeatureSchema>(std::move(schema));
}

}  // namespace embedps::worker
