#include "data/feature_schema.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/key_hash.h"
#include "data/criteo_reader.h"
#include "data/line_fields.h"

namespace embedps::data {
namespace {

std::string Quoted(absl::string_view field) {
  return absl::StrCat("'", absl::CEscape(field.substr(0, 64)),
                      field.size() > 64 ? "…'" : "'");
}

// A stable 64-bit hash of an id's text (the same on every machine and
// run, unlike absl::Hash).
uint64_t TextHash(absl::string_view text) {
  uint64_t hash = Mix64(text.size());
  size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t chunk = 0;
    std::memcpy(&chunk, text.data() + i, 8);
    hash = MixPair(hash, chunk);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, text.data() + i, text.size() - i);
  return MixPair(hash, tail);
}

absl::StatusOr<uint64_t> IdValue(absl::string_view id, IdFormat format) {
  switch (format) {
    case IdFormat::kText:
      return TextHash(id);
    case IdFormat::kHex: {
      uint64_t value = 0;
      if (id.size() > 16 || !absl::SimpleHexAtoi(id, &value) ||
          absl::StartsWith(id, "0x") || absl::StartsWith(id, "-") ||
          absl::StartsWith(id, "+")) {
        return absl::InvalidArgumentError(
            absl::StrCat(Quoted(id), " is not hex (at most 16 digits)"));
      }
      return value;
    }
    case IdFormat::kDecimal: {
      uint64_t value = 0;
      if (!absl::SimpleAtoi(id, &value) || absl::StartsWith(id, "+")) {
        return absl::InvalidArgumentError(
            absl::StrCat(Quoted(id), " is not a decimal id"));
      }
      return value;
    }
  }
  return absl::InternalError("unknown id format");
}

// A dense field without a value: empty, or a marker that dataframe
// writers put for a missing number (R's NA, Spark's null, Excel's #N/A,
// Python's nan: the markers pandas' read_csv reads as NaN).
bool MissingNumber(absl::string_view field) {
  static constexpr absl::string_view kMarkers[] = {
      "NA",   "N/A",     "n/a",     "NaN",    "nan",      "-NaN",
      "-nan", "NULL",    "null",    "None",   "#N/A",     "#NA",
      "<NA>", "1.#QNAN", "-1.#IND", "1.#IND", "-1.#QNAN", "#N/A N/A"};
  if (field.empty()) return true;
  if (absl::ascii_isdigit(field[0])) return false;  // a number's fast path
  for (absl::string_view marker : kMarkers) {
    if (field == marker) return true;
  }
  return false;
}

absl::StatusOr<double> Number(absl::string_view field) {
  double x = 0;
  if (!absl::SimpleAtod(field, &x) || !std::isfinite(x)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Quoted(field), " is not a finite number"));
  }
  return x;
}

// A label: 0 or 1, as any writer spells them ("1", "1.0" from a float
// column, "TRUE" from R's logicals).
absl::StatusOr<float> Label(absl::string_view field) {
  if (field == "0" || field == "1") return field == "1" ? 1.0f : 0.0f;
  double x = -1;
  if (absl::SimpleAtod(field, &x) && (x == 0.0 || x == 1.0)) {
    return x == 1.0 ? 1.0f : 0.0f;
  }
  if (absl::EqualsIgnoreCase(field, "true")) return 1.0f;
  if (absl::EqualsIgnoreCase(field, "false")) return 0.0f;
  return absl::InvalidArgumentError(absl::StrCat(
      "label ", Quoted(field), " is not 0 or 1 (nor 0.0/1.0, false/true)"));
}

}  // namespace

absl::StatusOr<FeatureSchema> ResolveFeatureSchema(
    const FeatureSchemaSpec& spec, std::optional<absl::string_view> header) {
  FeatureSchema schema;
  schema.column_separator = spec.column_separator;
  schema.list_separator = spec.list_separator;
  schema.weight_separator = spec.weight_separator;
  schema.header = spec.header;
  if (spec.column_separator == spec.list_separator ||
      spec.column_separator == spec.weight_separator ||
      spec.list_separator == spec.weight_separator ||
      spec.column_separator == '\n' || spec.list_separator == '\n') {
    return absl::InvalidArgumentError(
        "the column, list and weight separators must differ (and none be a "
        "newline)");
  }
  if (spec.column_separator == '"' || spec.list_separator == '"' ||
      spec.weight_separator == '"') {
    return absl::InvalidArgumentError(
        "no separator may be '\"': it quotes fields (RFC 4180)");
  }
  if (spec.sparse.empty()) {
    return absl::InvalidArgumentError("the schema names no sparse column");
  }
  absl::flat_hash_map<std::string, int> by_name;
  std::vector<std::string> names;
  if (spec.header) {
    if (!header.has_value()) {
      return absl::InvalidArgumentError(
          "the schema says the files have a header row; none was given");
    }
    absl::string_view line = *header;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    schema.header_line = std::string(line);
    LineFields header_fields;
    if (absl::Status split = header_fields.Split(line, spec.column_separator);
        !split.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the header row: ", split.message()));
    }
    for (absl::string_view name : header_fields.fields()) {
      name = absl::StripAsciiWhitespace(name);
      if (!by_name.emplace(std::string(name), names.size()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("the header names column ", Quoted(name), " twice"));
      }
      names.emplace_back(name);
    }
    schema.num_fields = static_cast<int>(names.size());
    schema.exact_fields = true;
  }
  std::vector<bool> used;
  // The field of a column given by name or position.
  const auto find = [&](const std::string& column,
                        const std::string& what) -> absl::StatusOr<int> {
    int field = -1;
    if (auto it = by_name.find(column); it != by_name.end()) {
      field = it->second;
    } else if (!absl::SimpleAtoi(column, &field) || field < 0 ||
               field > 100000) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": column ", Quoted(column),
          spec.header ? " is not in the header row"
                      : " is not a 0-based position (the files have no "
                        "header row)"));
    } else if (spec.header && field >= schema.num_fields) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": column ", field, " is past the header's ",
                       schema.num_fields, " columns"));
    }
    if (static_cast<size_t>(field) >= used.size()) used.resize(field + 1);
    if (used[field]) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": column ", Quoted(column), " is used twice in the schema"));
    }
    used[field] = true;
    if (!spec.header) {
      schema.num_fields = std::max(schema.num_fields, field + 1);
    }
    return field;
  };
  const auto name_of = [&](int field) {
    return spec.header ? names[field] : absl::StrCat("column ", field);
  };
  if (spec.label.empty()) {
    return absl::InvalidArgumentError("the schema names no label column");
  }
  auto label = find(spec.label, "label");
  if (!label.ok()) return label.status();
  schema.label = *label;
  for (size_t d = 0; d < spec.dense.size(); ++d) {
    auto field = find(spec.dense[d].column, absl::StrCat("dense ", d));
    if (!field.ok()) return field.status();
    FeatureSchema::Dense dense;
    dense.field = *field;
    dense.name = name_of(*field);
    dense.transform = spec.dense[d].transform;
    schema.dense.push_back(dense);
  }
  for (size_t s = 0; s < spec.sparse.size(); ++s) {
    const FeatureSchemaSpec::Sparse& given = spec.sparse[s];
    auto field = find(given.column, absl::StrCat("sparse ", s));
    if (!field.ok()) return field.status();
    if (given.weighted && !given.multi_valued) {
      return absl::InvalidArgumentError(
          absl::StrCat("sparse ", s, " (", name_of(*field),
                       "): weighted ids come in lists: set multi_valued too"));
    }
    if (given.max_values < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sparse ", s, " (", name_of(*field), "): max_values must be >= 1"));
    }
    FeatureSchema::Sparse sparse;
    sparse.field = *field;
    sparse.name = name_of(*field);
    sparse.multi_valued = given.multi_valued;
    sparse.weighted = given.weighted;
    sparse.max_values = given.multi_valued ? given.max_values : 1;
    sparse.id_format = given.id_format;
    schema.sparse.push_back(sparse);
  }
  return schema;
}

FeatureSchema WithoutLabel(FeatureSchema schema) {
  const int label = schema.label;
  if (label < 0) return schema;
  const auto shift = [label](int& field) {
    if (field > label) --field;
  };
  for (FeatureSchema::Dense& d : schema.dense) shift(d.field);
  for (FeatureSchema::Sparse& s : schema.sparse) shift(s.field);
  --schema.num_fields;
  // A request's line holds the fields the schema reads, no more: a line
  // that kept its label is refused, never read shifted.
  schema.exact_fields = true;
  schema.label = -1;
  if (schema.header) {
    // The names as the header writes them (quoted or not), less the
    // label's. (The header split when the schema was resolved.)
    LineFields header_fields;
    if (header_fields.Split(schema.header_line, schema.column_separator).ok()) {
      std::vector<absl::string_view> names(header_fields.raw().begin(),
                                           header_fields.raw().end());
      names.erase(names.begin() + label);
      schema.header_line =
          absl::StrJoin(names, std::string(1, schema.column_separator));
    }
  }
  return schema;
}

void SchemaBatch::Reset(const FeatureSchema& schema) {
  step = 0;
  size = 0;
  labels.clear();
  dense.clear();
  slots.assign(schema.sparse.size(), Bags());
}

absl::Status ParseSchemaLine(const FeatureSchema& schema,
                             absl::string_view line, SchemaBatch* batch,
                             ParseCounts* counts) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  LineFields fields;
  if (absl::Status split = fields.Split(line, schema.column_separator);
      !split.ok()) {
    return split;
  }
  const int n = static_cast<int>(fields.size());
  if (schema.exact_fields ? n != schema.num_fields : n < schema.num_fields) {
    return absl::InvalidArgumentError(absl::StrCat(
        n, " fields; the schema reads ", schema.exact_fields ? "" : "at least ",
        schema.num_fields));
  }
  const absl::StatusOr<float> label =
      schema.label >= 0 ? Label(fields[schema.label]) : 0.0f;
  if (!label.ok()) return label.status();
  // Parsed in full before anything is appended: a bad line leaves the
  // batch as it was.
  const size_t dense_before = batch->dense.size();
  std::vector<size_t> keys_before(batch->slots.size());
  for (size_t s = 0; s < batch->slots.size(); ++s) {
    keys_before[s] = batch->slots[s].keys.size();
  }
  const auto fail = [&](absl::Status status) {
    batch->dense.resize(dense_before);
    for (size_t s = 0; s < batch->slots.size(); ++s) {
      batch->slots[s].keys.resize(keys_before[s]);
      if (schema.sparse[s].weighted) {
        batch->slots[s].weights.resize(keys_before[s]);
      }
    }
    return status;
  };
  for (const FeatureSchema::Dense& d : schema.dense) {
    const absl::string_view field = fields[d.field];
    double x = 0;
    if (!MissingNumber(field)) {
      absl::StatusOr<double> parsed = Number(field);
      if (!parsed.ok()) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "dense column ", d.name, ": ", parsed.status().message())));
      }
      switch (d.transform) {
        case DenseTransform::kNone:
          x = *parsed;
          break;
        case DenseTransform::kLog1p:
          x = std::log1p(*parsed > 0 ? *parsed : 0.0);
          break;
        case DenseTransform::kStandardize:
          x = (*parsed - d.mean) * d.inv_std;
          break;
      }
    }
    batch->dense.push_back(static_cast<float>(x));
  }
  int64_t dropped = 0;
  for (size_t s = 0; s < schema.sparse.size(); ++s) {
    const FeatureSchema::Sparse& c = schema.sparse[s];
    SchemaBatch::Bags& bags = batch->slots[s];
    const absl::string_view field = fields[c.field];
    const int slot = static_cast<int>(s);
    if (!c.multi_valued) {
      if (field.empty()) {
        bags.keys.push_back(MissingFeatureKey(slot));
        continue;
      }
      absl::StatusOr<uint64_t> value = IdValue(field, c.id_format);
      if (!value.ok()) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "sparse column ", c.name, ": ", value.status().message())));
      }
      bags.keys.push_back(FeatureKey(slot, *value));
      continue;
    }
    int taken = 0;
    for (absl::string_view item :
         absl::StrSplit(field, schema.list_separator)) {
      if (item.empty()) continue;
      float weight = 1;
      if (c.weighted) {
        const size_t at = item.rfind(schema.weight_separator);
        absl::StatusOr<double> w =
            at == absl::string_view::npos
                ? absl::InvalidArgumentError(
                      absl::StrCat(Quoted(item), " has no weight"))
                : Number(item.substr(at + 1));
        if (!w.ok()) {
          return fail(absl::InvalidArgumentError(absl::StrCat(
              "sparse column ", c.name, ": ", w.status().message())));
        }
        weight = static_cast<float>(*w);
        item = item.substr(0, at);
      }
      if (taken == c.max_values) {
        ++dropped;
        continue;
      }
      absl::StatusOr<uint64_t> value = IdValue(item, c.id_format);
      if (!value.ok()) {
        return fail(absl::InvalidArgumentError(absl::StrCat(
            "sparse column ", c.name, ": ", value.status().message())));
      }
      bags.keys.push_back(FeatureKey(slot, *value));
      if (c.weighted) bags.weights.push_back(weight);
      ++taken;
    }
  }
  // Everything parsed: the sample is complete.
  batch->labels.push_back(*label);
  for (SchemaBatch::Bags& bags : batch->slots) {
    bags.offsets.push_back(static_cast<int32_t>(bags.keys.size()));
  }
  ++batch->size;
  if (counts != nullptr) counts->values_dropped += dropped;
  return absl::OkStatus();
}

DenseStatistics::DenseStatistics(const FeatureSchema& schema)
    : schema_(schema),
      count_(schema.dense.size(), 0),
      mean_(schema.dense.size(), 0.0),
      m2_(schema.dense.size(), 0.0) {}

void DenseStatistics::Add(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  LineFields fields;
  if (!fields.Split(line, schema_.column_separator).ok() ||
      static_cast<int>(fields.size()) < schema_.num_fields) {
    return;
  }
  for (size_t d = 0; d < schema_.dense.size(); ++d) {
    if (schema_.dense[d].transform != DenseTransform::kStandardize) continue;
    const absl::string_view field = fields[schema_.dense[d].field];
    if (MissingNumber(field)) continue;
    absl::StatusOr<double> x = Number(field);
    if (!x.ok()) continue;
    const double delta = *x - mean_[d];
    mean_[d] += delta / static_cast<double>(++count_[d]);
    m2_[d] += delta * (*x - mean_[d]);
  }
}

std::vector<int64_t> DenseStatistics::Apply(FeatureSchema* schema) const {
  for (size_t d = 0; d < schema->dense.size(); ++d) {
    if (schema->dense[d].transform != DenseTransform::kStandardize) continue;
    const double variance =
        count_[d] > 1 ? m2_[d] / static_cast<double>(count_[d] - 1) : 0.0;
    schema->dense[d].mean = mean_[d];
    schema->dense[d].inv_std = variance > 0 ? 1.0 / std::sqrt(variance) : 1.0;
  }
  return count_;
}

}  // namespace embedps::data
