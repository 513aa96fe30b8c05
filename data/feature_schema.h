// FeatureSchema: the columns of a data set that is not Criteo's — which
// is the label, which are dense features (with a transform each) and which
// are ids (one or a list per field, optionally weighted), each id column a
// slot of the model — and the parsing of one line into a batch of bags.
//
// A schema is given with columns by name or position (FeatureSchemaSpec,
// what config/worker_config.proto's FeatureSchema holds) and resolved
// against the files' header line, if they have one (ResolveFeatureSchema).
// Keys: the id of column slot s is FeatureKey(s, value) (criteo_reader.h)
// where value is the id read as hex or decimal, or a hash of its text; an
// empty single-valued field is MissingFeatureKey(s) (as Criteo's), an
// empty list is an empty bag. So the Criteo layout given as a schema (hex
// ids, log1p counts) makes the same keys and features as CriteoReader.
//
// Thread safety: plain data and pure functions.
#ifndef EMBEDPS_DATA_FEATURE_SCHEMA_H_
#define EMBEDPS_DATA_FEATURE_SCHEMA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace embedps::data {

enum class DenseTransform { kNone, kLog1p, kStandardize };
enum class IdFormat { kText, kHex, kDecimal };

// As a configuration gives it: columns by name (with a header) or 0-based
// position.
struct FeatureSchemaSpec {
  char column_separator = '\t';
  char list_separator = ',';
  char weight_separator = ':';
  bool header = false;
  std::string label;
  struct Dense {
    std::string column;
    DenseTransform transform = DenseTransform::kNone;
  };
  std::vector<Dense> dense;
  struct Sparse {
    std::string column;
    bool multi_valued = false;
    bool weighted = false;
    // Ids past this many in one field are left out (counted).
    int max_values = 256;
    IdFormat id_format = IdFormat::kText;
  };
  std::vector<Sparse> sparse;
};

// A spec with every column found: positions in the line.
struct FeatureSchema {
  char column_separator = '\t';
  char list_separator = ',';
  char weight_separator = ':';
  bool header = false;
  // With a header: the header row it was resolved against (without '\r').
  std::string header_line;
  // Fields every line has: exactly (with a header) or at least.
  int num_fields = 0;
  bool exact_fields = false;
  // The label's field; -1 for lines without one (WithoutLabel).
  int label = 0;
  struct Dense {
    int field = 0;
    std::string name;  // for messages: the header's name, or "column N"
    DenseTransform transform = DenseTransform::kNone;
    // kStandardize: (x − mean) · inv_std (SetStatistics; 0 and 1 until).
    double mean = 0;
    double inv_std = 1;
  };
  std::vector<Dense> dense;
  struct Sparse {
    int field = 0;
    std::string name;
    bool multi_valued = false;
    bool weighted = false;
    int max_values = 256;
    IdFormat id_format = IdFormat::kText;
  };
  std::vector<Sparse> sparse;
};

// Resolves `spec`'s columns: by name in `header` (the files' first line,
// without its newline) when spec.header — every line must then have the
// header's field count — else by position (a line must have at least the
// largest position + 1 fields; further ones are not read).
// INVALID_ARGUMENT naming the column: unknown, given twice, a weighted
// column that is not multi-valued, separators that collide, no sparse
// column, max_values < 1.
absl::StatusOr<FeatureSchema> ResolveFeatureSchema(
    const FeatureSchemaSpec& spec,
    std::optional<absl::string_view> header = std::nullopt);

// The schema of `schema`'s lines with the label field taken out (what a
// prediction is asked for): the fields after it move one to the left; a
// header line loses the label's name; a line must have exactly the
// fields left (by position: up to the last one the schema reads), so a
// line that kept its label is refused rather than read shifted. Parsed
// lines get label 0.
FeatureSchema WithoutLabel(FeatureSchema schema);

// A batch of samples read with a schema.
struct SchemaBatch {
  int64_t step = 0;
  int size = 0;
  std::vector<float> labels;  // size
  std::vector<float> dense;   // size × dense columns, sample-major
  // One per sparse column: its bags' keys, offsets (size + 1, from 0) and,
  // for weighted columns, a weight per key (else empty).
  struct Bags {
    std::vector<uint64_t> keys;
    std::vector<int32_t> offsets = {0};
    std::vector<float> weights;
  };
  std::vector<Bags> slots;

  // Empties the batch for `schema`'s columns.
  void Reset(const FeatureSchema& schema);
};

// What parsing a line noticed that is not an error.
struct ParseCounts {
  // Ids left out past a column's max_values.
  int64_t values_dropped = 0;
};

// Appends the sample of `line` (without its newline; a trailing '\r' is
// ignored) to `batch`. A dense field that is empty or a missing-value
// marker (NA, NaN, nan, null, N/A, #N/A, None, ...: what pandas' read_csv
// reads as NaN) has no value: 0 after its transform. INVALID_ARGUMENT
// saying which field is wrong (a wrong field count, a label other than 0
// or 1 ("1", "1.0", "true" in any case), a dense value that is not a
// finite number, an id that is not hex/decimal where the column says so, a
// weight that is not a number); the batch is then as before.
absl::Status ParseSchemaLine(const FeatureSchema& schema,
                             absl::string_view line, SchemaBatch* batch,
                             ParseCounts* counts = nullptr);

// Means and standard deviations of the STANDARDIZE columns, from lines.
class DenseStatistics {
 public:
  explicit DenseStatistics(const FeatureSchema& schema);
  // Adds the line's values (fields without a value, as ParseSchemaLine
  // reads them, and lines that do not parse are left out).
  void Add(absl::string_view line);
  // Sets each STANDARDIZE column's mean and 1/std (1 where the std is 0
  // or no value was seen). Returns how many values each column had.
  std::vector<int64_t> Apply(FeatureSchema* schema) const;

 private:
  const FeatureSchema& schema_;
  std::vector<int64_t> count_;
  std::vector<double> mean_, m2_;  // Welford's running moments
};

}  // namespace embedps::data

#endif  // EMBEDPS_DATA_FEATURE_SCHEMA_H_
