// BatchReader: streams text files of samples (plain or gzip, one sample a
// line) into training batches, parsing on its own thread so that the
// trainer never waits on text. What a line means is the Format's: Criteo's
// layout (criteo_reader.h) or a schema (schema_reader.h).
//
// Sharding and steps: with W workers and batch B, step t of worker r is
// lines [t·W·B + r·B, t·W·B + (r+1)·B) of the concatenated files (header
// rows left out), so every worker runs the same number of steps,
// floor(lines / (W·B)) per epoch (the lines counted when the reader opens;
// the tail is not trained on). A malformed line is logged with its file
// and line number, counted and left out of its batch (so a batch may hold
// fewer than B samples), or, with fatal_bad_lines, ends the stream with
// INVALID_ARGUMENT naming it. A gzip file that ends early (truncated or
// corrupt) is an error unless damaged_files_are_bad_lines.
//
// A Format is a class with
//   using Batch = ...;                    // with int64_t step, int size
//   void Reset(Batch*, int64_t step, int capacity) const;
//   absl::Status Parse(absl::string_view line, Batch*) const;  // appends
//       one sample (++size) or leaves the batch as it was
//   void Finish(Batch*) const;            // before the batch is delivered
//
// Thread safety: Next() from one thread at a time; stats() from any.
#ifndef EMBEDPS_DATA_BATCH_READER_H_
#define EMBEDPS_DATA_BATCH_READER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "data/line_reader.h"

namespace embedps::data {

struct BatchReaderOptions {
  // Read in order, as one stream. Required.
  std::vector<std::string> files;
  // Samples per worker per step. Default: 512.
  int batch_size = 512;
  // This worker and the number of workers. Defaults: 0, 1.
  int worker_index = 0;
  int num_workers = 1;
  // Passes over the files. Default: 1.
  int epochs = 1;
  // Longer lines are malformed (a bound against a file that is not text:
  // a line's bytes are held whole). Default: 1 MiB — a multi-hot line of
  // several lists of hundreds of ids runs to tens of KiB, and a bound that
  // dropped long lines would drop the long histories, biasing the data.
  size_t max_line_bytes = kMaxLineBytes;
  // Stop at the first malformed line instead of skipping it. Default: no.
  bool fatal_bad_lines = false;
  // A gzip file that ends early counts as one bad line (its lines before
  // the damage are read) instead of ending the stream with its error.
  // Default: no (Criteo's reader says yes, as it always did).
  bool damaged_files_are_bad_lines = false;
  // Every file's first line names the columns: not a sample. Default: no.
  bool header = false;
  // Parsed batches kept ready ahead of the trainer. Default: 8.
  int prefetch_batches = 8;
  // Also deliver the last, partial step of each epoch (for evaluation; a
  // file shorter than one batch is then one partial step). Only with
  // num_workers == 1. Default: no.
  bool include_tail = false;
  // Name used in log lines. Default: "train".
  std::string name = "train";
};

struct BatchReaderStats {
  int64_t lines_parsed = 0;  // this worker's lines
  int64_t bad_lines = 0;
  double parse_seconds = 0;  // reader thread time spent parsing
};

// The line count of `files` and the checks every reader makes when it
// opens (what BatchReader::Open does before it starts its thread).
struct CountedLines {
  int64_t lines = 0;
  int64_t damaged_files = 0;
};
absl::StatusOr<CountedLines> CountBatchLines(const BatchReaderOptions& options);

template <typename Format>
class BatchReader {
 public:
  using Batch = typename Format::Batch;

  // Counts the lines (one pass over the files) and starts the reader
  // thread. NOT_FOUND naming a missing file; INVALID_ARGUMENT for bad
  // options or files too short for one step; DATA_LOSS-turned-
  // INVALID_ARGUMENT for a damaged gzip file (see above).
  static absl::StatusOr<std::unique_ptr<BatchReader>> Open(
      const BatchReaderOptions& options, Format format = Format()) {
    absl::StatusOr<CountedLines> counted = CountBatchLines(options);
    if (!counted.ok()) return counted.status();
    return std::unique_ptr<BatchReader>(
        new BatchReader(options, std::move(format), *counted));
  }

  ~BatchReader() {
    {
      MutexLock lock(&mu_);
      closing_ = true;
    }
    changed_.SignalAll();
    thread_.join();
  }

  // Lines (samples) in one pass over the files, and the steps per epoch.
  int64_t total_lines() const { return total_lines_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return steps_per_epoch_ * options_.epochs; }
  const Format& format() const { return format_; }

  // The next step's batch; nullopt after the last step. INVALID_ARGUMENT
  // (with fatal_bad_lines) or an I/O error, naming the file and line.
  absl::StatusOr<std::optional<Batch>> Next() {
    MutexLock lock(&mu_);
    changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return !ready_.empty() || finished_;
    });
    if (ready_.empty()) return std::optional<Batch>();
    absl::StatusOr<Batch> item = std::move(ready_.front());
    ready_.pop_front();
    changed_.SignalAll();
    if (!item.ok()) {
      // Keep the error for any later call too.
      ready_.push_front(item.status());
      return item.status();
    }
    return std::optional<Batch>(std::move(*item));
  }

  BatchReaderStats stats() const {
    BatchReaderStats s;
    s.lines_parsed = lines_parsed_.load();
    s.bad_lines = bad_lines_.load();
    s.parse_seconds = parse_nanos_.load() * 1e-9;
    return s;
  }

 private:
  BatchReader(const BatchReaderOptions& options, Format format,
              CountedLines counted)
      : options_(options),
        format_(std::move(format)),
        total_lines_(counted.lines),
        steps_per_epoch_(
            (counted.lines +
             (options.include_tail ? options.batch_size - 1 : 0)) /
            (static_cast<int64_t>(options.batch_size) * options.num_workers)) {
    // The damaged end of each file counts as one bad line (once, however
    // many epochs read it).
    bad_lines_ = counted.damaged_files;
    thread_ = std::thread([this] { ReadLoop(); });
  }

  // Queues a finished batch or an error; false once the reader is closed.
  bool Deliver(absl::StatusOr<Batch> item) {
    MutexLock lock(&mu_);
    changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return closing_ ||
             ready_.size() < static_cast<size_t>(options_.prefetch_batches);
    });
    if (closing_) return false;
    ready_.push_back(std::move(item));
    changed_.SignalAll();
    return true;
  }

  void ReadLoop();

  const BatchReaderOptions options_;
  const Format format_;
  const int64_t total_lines_;
  const int64_t steps_per_epoch_;

  Mutex mu_;
  CondVar changed_;
  std::deque<absl::StatusOr<Batch>> ready_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;

  std::atomic<int64_t> lines_parsed_{0}, bad_lines_{0};
  std::atomic<int64_t> parse_nanos_{0};
  std::thread thread_;
};

template <typename Format>
void BatchReader<Format>::ReadLoop() {
  auto log = Logger("reader");
  const int64_t b = options_.batch_size;
  const int64_t per_step = b * options_.num_workers;
  const int64_t first_own = b * options_.worker_index;
  Batch batch;
  absl::Status error;
  bool pending = false;  // a batch was started and not delivered
  const auto deliver = [&]() {
    pending = false;
    format_.Finish(&batch);
    const bool open = Deliver(std::move(batch));
    batch = Batch();
    return open;
  };
  for (int epoch = 0; epoch < options_.epochs && error.ok(); ++epoch) {
    int64_t line_index = 0;  // samples within the epoch, across files
    for (const std::string& path : options_.files) {
      if (!error.ok() || line_index >= steps_per_epoch_ * per_step) break;
      absl::StatusOr<std::unique_ptr<LineReader>> reader =
          LineReader::Open(path, options_.max_line_bytes);
      if (!reader.ok()) {
        error = reader.status();
        break;
      }
      int64_t line_in_file = 0;
      absl::string_view line;
      bool too_long = false;
      while (line_index < steps_per_epoch_ * per_step) {
        absl::StatusOr<bool> more = (*reader)->Next(&line, &too_long);
        if (!more.ok() && more.status().code() == absl::StatusCode::kDataLoss &&
            options_.damaged_files_are_bad_lines && !options_.fatal_bad_lines) {
          // Its damaged end was counted when the reader opened.
          break;
        }
        if (!more.ok()) {
          error = MalformedFile(more.status());
          break;
        }
        if (!*more) break;
        ++line_in_file;
        if (options_.header && line_in_file == 1) continue;
        const int64_t position = line_index % per_step;
        const int64_t step = line_index / per_step;
        ++line_index;
        if (position < first_own || position >= first_own + b) continue;
        if (position == first_own) {
          format_.Reset(&batch, epoch * steps_per_epoch_ + step,
                        static_cast<int>(b));
          pending = true;
        }
        const absl::Time start = absl::Now();
        absl::Status parsed =
            too_long
                ? absl::InvalidArgumentError(absl::StrCat(
                      "line longer than ", options_.max_line_bytes, " bytes"))
                : format_.Parse(line, &batch);
        parse_nanos_ += absl::ToInt64Nanoseconds(absl::Now() - start);
        lines_parsed_++;
        if (!parsed.ok()) {
          const int64_t bad = ++bad_lines_;
          const std::string where =
              absl::StrCat(path, ":", line_in_file, ": ", parsed.message());
          if (options_.fatal_bad_lines) {
            error = absl::InvalidArgumentError(
                absl::StrCat("malformed line ", where));
            break;
          }
          // Every bad line up to 100, then every 1000th.
          if (bad <= 100 || bad % 1000 == 0) {
            log->warn("skipping malformed line {} ({} so far)", where, bad);
          }
        }
        if (position == first_own + b - 1 && !deliver()) return;
      }
    }
    // The partial last step (include_tail only reaches here with one).
    if (error.ok() && pending && !deliver()) return;
  }
  if (!error.ok()) {
    Deliver(error);
    return;
  }
  MutexLock lock(&mu_);
  finished_ = true;
  changed_.SignalAll();
}

}  // namespace embedps::data

#endif  // EMBEDPS_DATA_BATCH_READER_H_
