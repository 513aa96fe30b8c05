// Lines of plain, gzip or zstd text files, and what the readers of
// training files share about them: counting, and how a damaged file is
// reported.
//
// Thread safety: one thread at a time per LineReader.
#ifndef EMBEDPS_DATA_LINE_READER_H_
#define EMBEDPS_DATA_LINE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace embedps::data {

// The longest line the readers take by default (a bound against a file
// that is not text: a line's bytes are held whole).
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;

// Bytes of a file as its compression gives them; defined in the .cc.
class ByteSource;

// Lines of a file without their '\n': plain or gzip (zlib reads both,
// concatenated gzip members too) or zstd (its frames, one after another),
// told by the file's first bytes, not its name.
class LineReader {
 public:
  // NOT_FOUND naming the file if it cannot be opened; INVALID_ARGUMENT
  // for a file compressed another way (bzip2, xz), naming the remedy.
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(
      const std::string& path, size_t max_line_bytes);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line in `line` (valid until the next call); `too_long` when
  // it exceeded max_line_bytes (its content is then cut). False at the
  // end of the file. An I/O or gzip error is returned as a status. A
  // UTF-8 byte-order mark opening the file is not part of its first line.
  absl::StatusOr<bool> Next(absl::string_view* line, bool* too_long);

  const std::string& path() const { return path_; }

 private:
  LineReader(std::unique_ptr<ByteSource> source, std::string path,
             size_t max_line_bytes);
  absl::StatusOr<bool> NextLine(absl::string_view* line, bool* too_long);

  std::unique_ptr<ByteSource> source_;
  const std::string path_;
  const size_t max_line_bytes_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  bool first_line_ = true;
  std::string carry_;
};

// A damaged file's DATA_LOSS as a reader reports it when bad data is
// fatal (INVALID_ARGUMENT "malformed file ..."); other statuses as they are.
absl::Status MalformedFile(const absl::Status& status);

// The lines of `path`. A file whose data ends early (a truncated gzip or
// zstd stream) counts the lines before the damage and sets `*damaged` if
// `damaged_ok`, else is an error (MalformedFile).
absl::StatusOr<int64_t> CountLines(const std::string& path, bool damaged_ok,
                                   bool* damaged);

}  // namespace embedps::data

#endif  // EMBEDPS_DATA_LINE_READER_H_
