#include "data/line_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace embedps::data {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

}  // namespace

absl::Status MalformedFile(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kDataLoss) return status;
  return absl::InvalidArgumentError(
      absl::StrCat("malformed file ", status.message()));
}

// Reads up to `capacity` bytes into `out`: 0 at the end of the data,
// DATA_LOSS for data that ends early or does not decode.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual absl::StatusOr<size_t> Read(char* out, size_t capacity) = 0;
};

namespace {

// Plain and gzip files (zlib's gzread reads a file without a gzip header
// as it is).
class GzipSource : public ByteSource {
 public:
  GzipSource(gzFile file, std::string path)
      : file_(file), path_(std::move(path)) {}
  ~GzipSource() override { gzclose(file_); }

  absl::StatusOr<size_t> Read(char* out, size_t capacity) override {
    const int got = gzread(file_, out, static_cast<unsigned>(capacity));
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
            ": the gzip stream ends early (a truncated or corrupt file)"));
      }
    }
    return static_cast<size_t>(got);
  }

 private:
  gzFile file_;
  const std::string path_;
};

// Zstandard files: frames decoded one after another.
class ZstdSource : public ByteSource {
 public:
  ZstdSource(FILE* file, std::string path)
      : file_(file),
        path_(std::move(path)),
        context_(ZSTD_createDCtx()),
        in_(ZSTD_DStreamInSize()) {}
  ~ZstdSource() override {
    ZSTD_freeDCtx(context_);
    std::fclose(file_);
  }
  bool ok() const { return context_ != nullptr; }

  absl::StatusOr<size_t> Read(char* out, size_t capacity) override {
    ZSTD_outBuffer output{out, capacity, 0};
    while (true) {
      if (input_.pos == input_.size && !input_ended_) {
        const size_t got = std::fread(in_.data(), 1, in_.size(), file_);
        if (got == 0) {
          if (std::ferror(file_)) {
            return absl::DataLossError(
                absl::StrCat("reading ", path_, ": ", std::strerror(errno)));
          }
          input_ended_ = true;
        }
        input_ = ZSTD_inBuffer{in_.data(), got, 0};
      }
      const size_t consumed = input_.pos;
      const size_t left = ZSTD_decompressStream(context_, &output, &input_);
      if (ZSTD_isError(left)) {
        return absl::DataLossError(absl::StrCat(
            path_, ": the zstd stream does not decode (a corrupt file): ",
            ZSTD_getErrorName(left)));
      }
      // 0 once a frame is whole and flushed (a call that moves nothing
      // says only what the next frame would need).
      if (input_.pos != consumed || output.pos > 0) frame_left_ = left;
      if (output.pos > 0) return output.pos;
      if (input_ended_ && input_.pos == input_.size) {
        if (frame_left_ != 0) {
          return absl::DataLossError(absl::StrCat(
              path_,
              ": the zstd stream ends early (a truncated or corrupt file)"));
        }
        return 0;
      }
    }
  }

 private:
  FILE* const file_;
  const std::string path_;
  ZSTD_DCtx* const context_;
  std::vector<char> in_;
  ZSTD_inBuffer input_{nullptr, 0, 0};
  bool input_ended_ = false;
  size_t frame_left_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(
    const std::string& path, size_t max_line_bytes) {
  FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot open data file ", path,
                                            ": ", std::strerror(errno)));
  }
  unsigned char magic[6] = {0};
  const size_t got = std::fread(magic, 1, sizeof(magic), file);
  const auto starts = [&](std::initializer_list<unsigned char> bytes) {
    return got >= bytes.size() && std::equal(bytes.begin(), bytes.end(), magic);
  };
  std::unique_ptr<ByteSource> source;
  if (starts({0x28, 0xB5, 0x2F, 0xFD})) {
    std::rewind(file);
    auto zstd = std::make_unique<ZstdSource>(file, path);
    if (!zstd->ok()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("no memory for a zstd decoder of data file ", path));
    }
    source = std::move(zstd);
  } else {
    std::fclose(file);
    const char* other = starts({'B', 'Z', 'h'})                    ? "bzip2"
                        : starts({0xFD, '7', 'z', 'X', 'Z', 0x00}) ? "xz"
                        : starts({'P', 'A', 'R', '1'})             ? "Parquet"
                                                                   : nullptr;
    if (other != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data file ", path, " is ", other,
          "; the readers take text (TSV or CSV), plain or compressed with "
          "gzip or zstd: ",
          std::strcmp(other, "Parquet") == 0 ? "export it as CSV"
                                             : "recompress it"));
    }
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot open data file ", path,
                                              ": ", std::strerror(errno)));
    }
    gzbuffer(gz, kChunk);
    source = std::make_unique<GzipSource>(gz, path);
  }
  return std::unique_ptr<LineReader>(
      new LineReader(std::move(source), path, max_line_bytes));
}

LineReader::LineReader(std::unique_ptr<ByteSource> source, std::string path,
                       size_t max_line_bytes)
    : source_(std::move(source)),
      path_(std::move(path)),
      max_line_bytes_(max_line_bytes),
      buffer_(kChunk) {}

LineReader::~LineReader() = default;

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
      ASSIGN_OR_RETURN(const size_t got, source_->Read(buffer_.data(), kChunk));
      if (got == 0) {
        eof_ = true;
        break;
      }
      begin_ = 0;
      end_ = got;
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
