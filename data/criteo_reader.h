// CriteoReader: streams Criteo display-advertising text files (plain or
// gzip) into training batches, parsing on its own thread so that the
// trainer never waits on text.
//
// Line format: label \t I1..I13 \t C1..C26 — integer features (may be
// empty or negative) and categorical features as hex strings of up to 16
// digits (may be empty). A sample becomes:
//   label (0 or 1),
//   dense[j] = log(1 + max(I_j, 0)) (0 when empty) — DLRM's transform,
//   keys[s] = FeatureKey(s, C_s): the value hashed together with its slot
//             (an empty value is its own per-slot key).
//
// Sharding and steps: with W workers and batch B, step t of worker r is
// lines [t·W·B + r·B, t·W·B + (r+1)·B) of the concatenated files, so every
// worker runs the same number of steps, floor(lines / (W·B)) per epoch
// (the lines counted when the reader opens; the tail is not trained on).
// A malformed line — wrong field count, a non-integer integer, a bad hex
// value, a label other than 0/1, a line over max_line_bytes — is logged
// with its file and line number, counted and left out of its batch (so a
// batch may hold fewer than B samples), or, with fatal_bad_lines, ends the
// stream with INVALID_ARGUMENT naming it.
//
// Thread safety: Next() from one thread at a time; stats() from any.
#ifndef EMBEDPS_DATA_CRITEO_READER_H_
#define EMBEDPS_DATA_CRITEO_READER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"

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

struct CriteoReaderOptions {
  // Read in order, as one stream. Required.
  std::vector<std::string> files;
  // Samples per worker per step. Default: 512.
  int batch_size = 512;
  // This worker and the number of workers. Defaults: 0, 1.
  int worker_index = 0;
  int num_workers = 1;
  // Passes over the files. Default: 1.
  int epochs = 1;
  // Longer lines are malformed. Default: 4096.
  size_t max_line_bytes = 4096;
  // Stop at the first malformed line instead of skipping it. Default: no.
  bool fatal_bad_lines = false;
  // Parsed batches kept ready ahead of the trainer. Default: 8.
  int prefetch_batches = 8;
  // Also deliver the last, partial step of each epoch (for evaluation; a
  // file shorter than one batch is then one partial step). Only with
  // num_workers == 1. Default: no.
  bool include_tail = false;
  // Name used in log lines. Default: "train".
  std::string name = "train";
};

struct CriteoReaderStats {
  int64_t lines_parsed = 0;  // this worker's lines
  int64_t bad_lines = 0;
  double parse_seconds = 0;  // reader thread time spent parsing
};

class CriteoReader {
 public:
  // Counts the lines (one pass over the files) and starts the reader
  // thread. NOT_FOUND naming a missing file; INVALID_ARGUMENT for bad
  // options or files too short for one step.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(
      const CriteoReaderOptions& options);
  ~CriteoReader();

  // Lines in one pass over the files, and the steps per epoch.
  int64_t total_lines() const { return total_lines_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return steps_per_epoch_ * options_.epochs; }

  // The next step's batch; nullopt after the last step. INVALID_ARGUMENT
  // (with fatal_bad_lines) or an I/O error, naming the file and line.
  absl::StatusOr<std::optional<CriteoBatch>> Next();

  CriteoReaderStats stats() const;

 private:
  CriteoReader(const CriteoReaderOptions& options, int64_t total_lines,
               int64_t damaged_files);
  void ReadLoop();
  // Queues a finished batch or an error; false once the reader is closed.
  bool Deliver(absl::StatusOr<CriteoBatch> item);

  const CriteoReaderOptions options_;
  const int64_t total_lines_;
  const int64_t steps_per_epoch_;

  Mutex mu_;
  CondVar changed_;
  std::deque<absl::StatusOr<CriteoBatch>> ready_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<int64_t> lines_parsed_{0}, bad_lines_{0};
  std::atomic<int64_t> parse_nanos_{0};
  std::thread thread_;
};

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
