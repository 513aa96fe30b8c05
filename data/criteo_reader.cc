#include "data/criteo_reader.h"

#include <zlib.h>

#include <cmath>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/key_hash.h"
#include "common/logging.h"

namespace embedps::data {
namespace {

constexpr int kFields = 1 + kCriteoDense + kCriteoSlots;
constexpr size_t kChunk = size_t{1} << 20;

// A field as a message shows it: in quotes, with control characters (a
// stray '\r', a NUL) escaped so that they are visible.
std::string Quoted(absl::string_view field) {
  return absl::StrCat("'", absl::CEscape(field), "'");
}

// A damaged data file, as the reader reports it when bad data is fatal.
absl::Status MalformedFile(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kDataLoss) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("malformed file ", status.message()));
}

// Lines of a plain or gzip file (zlib reads both), without their '\n'.
class LineReader {
 public:
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(
      const std::string& path, size_t max_line_bytes) {
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot open data file ", path,
                                              ": ", std::strerror(errno)));
    }
    gzbuffer(file, kChunk);
    return std::unique_ptr<LineReader>(
        new LineReader(file, path, max_line_bytes));
  }
  ~LineReader() { gzclose(file_); }

  // The next line in `line` (valid until the next call); `too_long` when
  // it exceeded max_line_bytes (its content is then cut). False at the
  // end of the file. An I/O or gzip error is returned as a status.
  absl::StatusOr<bool> Next(absl::string_view* line, bool* too_long) {
    *too_long = false;
    std::string* long_line = nullptr;
    carry_.clear();
    while (true) {
      if (begin_ == end_) {
        if (eof_) break;
        const int got = gzread(file_, buffer_.data(), kChunk);
        if (got < 0) {
          int code = 0;
          return absl::DataLossError(
              absl::StrCat("reading ", path_, ": ", gzerror(file_, &code)));
        }
        if (got == 0) {
          // zlib reports a gzip stream that ends before its trailer (a
          // truncated file) only here, as Z_BUF_ERROR at the end.
          int code = Z_OK;
          gzerror(file_, &code);
          if (code == Z_BUF_ERROR) {
            return absl::DataLossError(absl::StrCat(
                path_,
                ": the gzip stream ends early (a truncated or corrupt "
                "file)"));
          }
          eof_ = true;
          break;
        }
        begin_ = 0;
        end_ = static_cast<size_t>(got);
      }
      const char* start = buffer_.data() + begin_;
      const void* newline = std::memchr(start, '\n', end_ - begin_);
      const size_t length = newline != nullptr
                                ? static_cast<const char*>(newline) - start
                                : end_ - begin_;
      if (carry_.empty() && newline != nullptr) {
        begin_ += length + 1;
        *line = absl::string_view(start, length);
        *too_long = length > max_line_bytes_;
        return true;
      }
      // The line continues in the next chunk: keep what fits.
      long_line = &carry_;
      const size_t room = max_line_bytes_ + 1 > carry_.size()
                              ? max_line_bytes_ + 1 - carry_.size()
                              : 0;
      carry_.append(start, std::min(room, length));
      if (length > room) *too_long = true;
      begin_ += length;
      if (newline != nullptr) {
        ++begin_;
        break;
      }
    }
    if (long_line == nullptr) return false;  // end of file, nothing pending
    if (carry_.size() > max_line_bytes_) *too_long = true;
    *line = carry_;
    return true;
  }

  const std::string& path() const { return path_; }

 private:
  LineReader(gzFile file, std::string path, size_t max_line_bytes)
      : file_(file),
        path_(std::move(path)),
        max_line_bytes_(max_line_bytes),
        buffer_(kChunk) {}

  gzFile file_;
  const std::string path_;
  const size_t max_line_bytes_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  std::string carry_;
};

// The lines of `path`. A file whose data ends early (a truncated gzip
// stream) counts the lines before the damage and sets `*damaged`, unless
// `fatal`.
absl::StatusOr<int64_t> CountLines(const std::string& path, bool fatal,
                                   bool* damaged) {
  absl::StatusOr<std::unique_ptr<LineReader>> reader =
      LineReader::Open(path, /*max_line_bytes=*/0);
  if (!reader.ok()) return reader.status();
  int64_t lines = 0;
  absl::string_view line;
  bool too_long = false;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line, &too_long);
    if (!more.ok()) {
      if (more.status().code() == absl::StatusCode::kDataLoss && !fatal) {
        *damaged = true;
        Logger("reader")->warn("{}: reading its first {} lines only",
                               more.status().message(), lines);
        return lines;
      }
      return MalformedFile(more.status());
    }
    if (!*more) return lines;
    ++lines;
  }
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

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(
    const CriteoReaderOptions& options) {
  if (options.files.empty()) {
    return absl::InvalidArgumentError("no data files given");
  }
  if (options.batch_size <= 0 || options.num_workers <= 0 ||
      options.worker_index < 0 || options.worker_index >= options.num_workers ||
      options.epochs <= 0 || options.prefetch_batches <= 0 ||
      (options.include_tail && options.num_workers != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad reader options: batch_size ", options.batch_size, ", worker ",
        options.worker_index, " of ", options.num_workers, ", epochs ",
        options.epochs, options.include_tail ? ", include_tail" : ""));
  }
  int64_t lines = 0, damaged_files = 0;
  for (const std::string& file : options.files) {
    bool damaged = false;
    absl::StatusOr<int64_t> n =
        CountLines(file, options.fatal_bad_lines, &damaged);
    if (!n.ok()) return n.status();
    lines += *n;
    damaged_files += damaged;
  }
  // With the tail, a single partial step is a step (an evaluation of a
  // small test set); without, training needs one whole step per worker.
  const int64_t per_step =
      options.include_tail
          ? 1
          : static_cast<int64_t>(options.batch_size) * options.num_workers;
  if (lines < per_step) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the ", options.name, " files hold ", lines, " lines, fewer than one ",
        "step needs (", options.num_workers, " workers × batch ",
        options.batch_size, ")"));
  }
  return std::unique_ptr<CriteoReader>(
      new CriteoReader(options, lines, damaged_files));
}

CriteoReader::CriteoReader(const CriteoReaderOptions& options,
                           int64_t total_lines, int64_t damaged_files)
    : options_(options),
      total_lines_(total_lines),
      steps_per_epoch_(
          (total_lines + (options.include_tail ? options.batch_size - 1 : 0)) /
          (static_cast<int64_t>(options.batch_size) * options.num_workers)) {
  // The damaged end of each file counts as one bad line (once, however
  // many epochs read it).
  bad_lines_ = damaged_files;
  thread_ = std::thread([this] { ReadLoop(); });
}

CriteoReader::~CriteoReader() {
  {
    MutexLock lock(&mu_);
    closing_ = true;
  }
  changed_.SignalAll();
  thread_.join();
}

bool CriteoReader::Deliver(absl::StatusOr<CriteoBatch> item) {
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

void CriteoReader::ReadLoop() {
  auto log = Logger("reader");
  const int64_t b = options_.batch_size;
  const int64_t per_step = b * options_.num_workers;
  const int64_t first_own = b * options_.worker_index;
  CriteoBatch batch;
  const auto reset = [&](int64_t step) {
    batch.step = step;
    batch.size = 0;
    batch.labels.resize(b);
    batch.dense.resize(b * kCriteoDense);
    batch.keys.resize(b * kCriteoSlots);
  };
  absl::Status error;
  bool pending = false;  // a batch was started and not delivered
  const auto deliver = [&]() {
    pending = false;
    batch.labels.resize(batch.size);
    batch.dense.resize(static_cast<size_t>(batch.size) * kCriteoDense);
    batch.keys.resize(static_cast<size_t>(batch.size) * kCriteoSlots);
    const bool open = Deliver(std::move(batch));
    batch = CriteoBatch();
    return open;
  };
  for (int epoch = 0; epoch < options_.epochs && error.ok(); ++epoch) {
    int64_t line_index = 0;  // within the epoch, across files
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
            !options_.fatal_bad_lines) {
          // Its damaged end was counted when the reader opened.
          break;
        }
        if (!more.ok()) {
          error = MalformedFile(more.status());
          break;
        }
        if (!*more) break;
        ++line_in_file;
        const int64_t position = line_index % per_step;
        const int64_t step = line_index / per_step;
        ++line_index;
        if (position < first_own || position >= first_own + b) continue;
        if (position == first_own) {
          reset(epoch * steps_per_epoch_ + step);
          pending = true;
        }
        const absl::Time start = absl::Now();
        absl::Status parsed =
            too_long
                ? absl::InvalidArgumentError(absl::StrCat(
                      "line longer than ", options_.max_line_bytes, " bytes"))
                : ParseCriteoLine(line.data(), line.size(), &batch, batch.size);
        parse_nanos_ += absl::ToInt64Nanoseconds(absl::Now() - start);
        lines_parsed_++;
        if (parsed.ok()) {
          ++batch.size;
        } else {
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

absl::StatusOr<std::optional<CriteoBatch>> CriteoReader::Next() {
  MutexLock lock(&mu_);
  changed_.Wait(&mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return !ready_.empty() || finished_;
  });
  if (ready_.empty()) return std::optional<CriteoBatch>();
  absl::StatusOr<CriteoBatch> item = std::move(ready_.front());
  ready_.pop_front();
  changed_.SignalAll();
  if (!item.ok()) {
    // Keep the error for any later call too.
    ready_.push_front(item.status());
    return item.status();
  }
  return std::optional<CriteoBatch>(std::move(*item));
}

CriteoReaderStats CriteoReader::stats() const {
  CriteoReaderStats s;
  s.lines_parsed = lines_parsed_.load();
  s.bad_lines = bad_lines_.load();
  s.parse_seconds = parse_nanos_.load() * 1e-9;
  return s;
}

}  // namespace embedps::data
