#include "data/line_reader.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace embedps::data {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

}  // namespace

absl::Status MalformedFile(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kDataLoss) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("malformed file ", status.message()));
}

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(
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

LineReader::LineReader(gzFile file, std::string path, size_t max_line_bytes)
    : file_(file),
      path_(std::move(path)),
      max_line_bytes_(max_line_bytes),
      buffer_(kChunk) {}

LineReader::~LineReader() { gzclose(file_); }

absl::StatusOr<bool> LineReader::Next(absl::string_view* line, bool* too_long) {
  absl::StatusOr<bool> more = NextLine(line, too_long);
  if (first_line_ && more.ok() && *more) {
    // A UTF-8 byte-order mark (Excel's "CSV UTF-8", Windows tools) opens
    // the file, not its first field.
    first_line_ = false;
    constexpr absl::string_view kByteOrderMark = "\xEF\xBB\xBF";
    if (absl::StartsWith(*line, kByteOrderMark)) {
      line->remove_prefix(kByteOrderMark.size());
    }
  }
  return more;
}

absl::StatusOr<bool> LineReader::NextLine(absl::string_view* line,
                                          bool* too_long) {
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

absl::StatusOr<int64_t> CountLines(const std::string& path, bool damaged_ok,
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
      if (more.status().code() == absl::StatusCode::kDataLoss && damaged_ok) {
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

}  // namespace embedps::data
