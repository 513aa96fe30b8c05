#include "data/line_fields.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace embedps::data {

absl::Status LineFields::Split(absl::string_view line, char separator) {
  fields_.clear();
  raw_.clear();
  unescaped_.clear();
  quoted_ = std::memchr(line.data(), '"', line.size()) != nullptr;
  if (!quoted_) {
    // No quote anywhere: the common case, one pass.
    for (absl::string_view field : absl::StrSplit(line, separator)) {
      fields_.push_back(field);
    }
    return absl::OkStatus();
  }
  const size_t n = line.size();
  size_t i = 0;
  while (true) {
    const size_t start = i;
    if (i < n && line[i] == '"') {
      const size_t content = ++i;
      bool doubled = false;
      size_t close = absl::string_view::npos;
      while (i < n) {
        if (line[i] == '"') {
          if (i + 1 < n && line[i + 1] == '"') {
            doubled = true;
            i += 2;
            continue;
          }
          close = i;
          break;
        }
        ++i;
      }
      const size_t column = fields_.size();
      if (close == absl::string_view::npos) {
        fields_.clear();
        raw_.clear();
        return absl::InvalidArgumentError(absl::StrCat(
            "column ", column,
            ": its opening quote is not closed on the line (a quoted field "
            "cannot span lines)"));
      }
      i = close + 1;
      if (i < n && line[i] != separator) {
        fields_.clear();
        raw_.clear();
        return absl::InvalidArgumentError(
            absl::StrCat("column ", column,
                         ": text after its closing quote (a quote inside a "
                         "quoted field is written twice)"));
      }
      absl::string_view text = line.substr(content, close - content);
      if (doubled) {
        if (unescaped_.capacity() < n) unescaped_.reserve(n);
        const size_t begin = unescaped_.size();
        for (size_t k = 0; k < text.size(); ++k) {
          unescaped_.push_back(text[k]);
          if (text[k] == '"') ++k;  // the second of a doubled quote
        }
        text = absl::string_view(unescaped_.data() + begin,
                                 unescaped_.size() - begin);
      }
      fields_.push_back(text);
      raw_.push_back(line.substr(start, i - start));
    } else {
      size_t end = line.find(separator, i);
      if (end == absl::string_view::npos) end = n;
      fields_.push_back(line.substr(i, end - i));
      raw_.push_back(fields_.back());
      i = end;
    }
    if (i >= n) break;
    ++i;  // the separator; a field follows (empty at the line's end)
  }
  return absl::OkStatus();
}

}  // namespace embedps::data
