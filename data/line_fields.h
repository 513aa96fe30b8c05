// LineFields: the fields of one line of a delimited text file (CSV, TSV),
// split at a separator with RFC 4180's quoting: a field that begins with
// '"' runs to its closing quote, a doubled quote inside it is one quote,
// and a separator inside it is text. That is how R's write.csv, pandas'
// QUOTE_ALL / QUOTE_NONNUMERIC / QUOTE_MINIMAL and Spark write fields
// (Spark writes an empty string as ""); a field that does not begin with
// a quote is taken as it is, quotes included. A quoted field cannot span
// lines (the files are read line by line).
//
// Thread safety: one thread at a time per LineFields.
#ifndef EMBEDPS_DATA_LINE_FIELDS_H_
#define EMBEDPS_DATA_LINE_FIELDS_H_

#include <string>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace embedps::data {

class LineFields {
 public:
  // Splits `line` (without its newline). INVALID_ARGUMENT naming the
  // 0-based column for a quoted field not closed on the line, or text
  // between a closing quote and the next separator; the fields are then
  // empty.
  absl::Status Split(absl::string_view line, char separator);

  // The fields, unquoted; `raw()`: as the line writes them (quotes
  // included). Both are valid until the next Split, and while `line` is.
  absl::Span<const absl::string_view> fields() const { return fields_; }
  absl::Span<const absl::string_view> raw() const {
    return quoted_ ? raw_ : fields_;
  }
  size_t size() const { return fields_.size(); }
  absl::string_view operator[](size_t i) const { return fields_[i]; }

 private:
  absl::InlinedVector<absl::string_view, 64> fields_, raw_;
  // Whether the line had a quote: raw_ is filled only then (else the
  // fields are as written).
  bool quoted_ = false;
  // The text of quoted fields with doubled quotes, undoubled (reserved to
  // the line's size before use, so views into it stay valid).
  std::string unescaped_;
};

}  // namespace embedps::data

#endif  // EMBEDPS_DATA_LINE_FIELDS_H_
