#include "data/criteo_reader.h"

#include <cmath>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/key_hash.h"
#include "common/status_macros.h"

namespace embedps::data {
namespace {

constexpr int kFields = 1 + kCriteoDense + kCriteoSlots;

// A field as a message shows it: in quotes, with control characters (a
// stray '\r', a NUL) escaped so that they are visible.
std::string Quoted(absl::string_view field) {
  return absl::StrCat("'", absl::CEscape(field), "'");
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

uint64_t FeatureKey(int slot, uint64_t value) {
  return MixPair(static_cast<uint64_t>(slot) + 1, value);
}

uint64_t MissingFeatureKey(int slot) {
  // A stream of its own: no value of any slot maps here but by a 2^-64
  // accident.
  return MixPair(~static_cast<uint64_t>(slot), 0x6d697373696e67);
}

namespace {

// A line with (`labelled`) or without its label column.
absl::Status ParseLine(const char* line, size_t size, bool labelled,
                       CriteoBatch* batch, int i) {
  // Windows line endings: the '\r' before the '\n' is not part of the line.
  if (size > 0 && line[size - 1] == '\r') --size;
  const int want = labelled ? kFields : kFields - 1;
  absl::string_view parsed[kFields];
  // Field k of a labelled line (0: the label).
  const auto fields = [&](int k) { return parsed[labelled ? k : k - 1]; };
  int count = 0;
  size_t start = 0;
  for (size_t p = 0; p <= size; ++p) {
    if (p == size || line[p] == '\t') {
      if (count == want) {
        return absl::InvalidArgumentError(
            absl::StrCat("more than ", want, " tab-separated fields"));
      }
      parsed[count++] = absl::string_view(line + start, p - start);
      start = p + 1;
    }
  }
  if (count != want) {
    return absl::InvalidArgumentError(
        absl::StrCat(count, " tab-separated fields, want ", want,
                     labelled ? " (label, 13 integer, 26 categorical)"
                              : " (13 integer, 26 categorical: no label)"));
  }
  if (labelled) {
    if (fields(0) != "0" && fields(0) != "1") {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", Quoted(fields(0)), " is not 0 or 1"));
    }
    batch->labels[i] = fields(0) == "1" ? 1.0f : 0.0f;
  }
  float* dense = batch->dense.data() + static_cast<size_t>(i) * kCriteoDense;
  for (int j = 0; j < kCriteoDense; ++j) {
    const absl::string_view f = fields(1 + j);
    int64_t x = 0;
    if (!f.empty() && !absl::SimpleAtoi(f, &x)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "integer feature I", j + 1, " is ", Quoted(f), ", not an integer"));
    }
    dense[j] =
        static_cast<float>(std::log1p(static_cast<double>(x > 0 ? x : 0)));
  }
  uint64_t* keys = batch->keys.data() + static_cast<size_t>(i) * kCriteoSlots;
  for (int s = 0; s < kCriteoSlots; ++s) {
    const absl::string_view f = fields(1 + kCriteoDense + s);
    if (f.empty()) {
      keys[s] = MissingFeatureKey(s);
      continue;
    }
    if (f.size() > 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("categorical feature C", s + 1, " has ", f.size(),
                       " hex digits (at most 16)"));
    }
    uint64_t value = 0;
    for (char c : f) {
      const int d = HexDigit(c);
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "categorical feature C", s + 1, " ", Quoted(f), " is not hex"));
      }
      value = value << 4 | static_cast<uint64_t>(d);
    }
    keys[s] = FeatureKey(s, value);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseCriteoLine(const char* line, size_t size, CriteoBatch* batch,
                             int i) {
  return ParseLine(line, size, /*labelled=*/true, batch, i);
}

absl::Status ParseCriteoFeatures(const char* line, size_t size,
                                 CriteoBatch* batch, int i) {
  return ParseLine(line, size, /*labelled=*/false, batch, i);
}

void CriteoFormat::Reset(CriteoBatch* batch, int64_t step, int capacity) const {
  batch->step = step;
  batch->size = 0;
  batch->labels.resize(capacity);
  batch->dense.resize(static_cast<size_t>(capacity) * kCriteoDense);
  batch->keys.resize(static_cast<size_t>(capacity) * kCriteoSlots);
}

absl::Status CriteoFormat::Parse(absl::string_view line,
                                 CriteoBatch* batch) const {
  RETURN_IF_ERROR(
      ParseCriteoLine(line.data(), line.size(), batch, batch->size));
  ++batch->size;
  return absl::OkStatus();
}

void CriteoFormat::Finish(CriteoBatch* batch) const {
  batch->labels.resize(batch->size);
  batch->dense.resize(static_cast<size_t>(batch->size) * kCriteoDense);
  batch->keys.resize(static_cast<size_t>(batch->size) * kCriteoSlots);
}

}  // namespace embedps::data
