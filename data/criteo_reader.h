// CriteoReader: streams Criteo display-advertising text files (plain or
// gzip) into training batches (a BatchReader of CriteoFormat: sharding,
// bad lines and damaged files as batch_reader.h says).
//
// Line format: label \t I1..I13 \t C1..C26 — integer features (may be
// empty or negative) and categorical features as hex strings of up to 16
// digits (may be empty). A sample becomes:
//   label (0 or 1),
//   dense[j] = log(1 + max(I_j, 0)) (0 when empty) — DLRM's transform,
//   keys[s] = FeatureKey(s, C_s): the value hashed together with its slot
//             (an empty value is its own per-slot key).
//
// Thread safety: Next() from one thread at a time; stats() from any.
#ifndef EMBEDPS_DATA_CRITEO_READER_H_
#define EMBEDPS_DATA_CRITEO_READER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "data/batch_reader.h"

namespace embedps::data {

inline constexpr int kCriteoDense = 13;
inline constexpr int kCriteoSlots = 26;

// The embedding key of categorical value `value` in slot `slot`.
uint64_t FeatureKey(int slot, uint64_t value);
// The key of an empty value in `slot`.
uint64_t MissingFeatureKey(int slot);

struct CriteoBatch {
  int64_t step = 0;
  int size = 0;
  std::vector<float> labels;   // size
  std::vector<float> dense;    // size × 13
  std::vector<uint64_t> keys;  // size × 26, sample-major
};

// Criteo's line format for BatchReader.
struct CriteoFormat {
  using Batch = CriteoBatch;
  void Reset(CriteoBatch* batch, int64_t step, int capacity) const;
  absl::Status Parse(absl::string_view line, CriteoBatch* batch) const;
  void Finish(CriteoBatch* batch) const;
};

// Criteo's reader: BatchReader's options (a damaged gzip file is an error
// unless damaged_files_are_bad_lines), stats and streaming.
using CriteoReaderOptions = BatchReaderOptions;
using CriteoReaderStats = BatchReaderStats;
using CriteoReader = BatchReader<CriteoFormat>;

// Parses one line (without its newline) into the i-th sample of `batch`
// (whose vectors must have room). Exposed for tests. INVALID_ARGUMENT
// saying what is wrong.
absl::Status ParseCriteoLine(const char* line, size_t size, CriteoBatch* batch,
                             int i);

// As ParseCriteoLine, for a line without the label column (13 integer and
// 26 categorical fields: what a prediction is asked for); batch->labels
// is not touched.
absl::Status ParseCriteoFeatures(const char* line, size_t size,
                                 CriteoBatch* batch, int i);

}  // namespace embedps::data

#endif  // EMBEDPS_DATA_CRITEO_READER_H_
