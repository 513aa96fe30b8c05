// Fuzz target: a data file's bytes as the readers open them
// (data/line_reader.h): plain text, gzip or zstd told by their first
// bytes, lines cut at a bound, a damaged stream reported, never read past.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "data/line_reader.h"

namespace {

// A file of this process's own, rewritten for every input.
const std::string& FilePath() {
  static const std::string* path = [] {
    std::string pattern = "/tmp/line_reader_fuzz_XXXXXX";
    const int fd = mkstemp(pattern.data());
    if (fd < 0) std::abort();
    close(fd);
    return new std::string(pattern);
  }();
  return *path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte picks the line bound (0 to 255 bytes, or 1 MiB): short
  // bounds reach the cut-line path, the long one whole lines.
  if (size == 0) return 0;
  const size_t max_line_bytes = data[0] == 255 ? size_t{1} << 20 : data[0];
  const std::string& path = FilePath();
  FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) std::abort();
  std::fwrite(data + 1, 1, size - 1, file);
  std::fclose(file);
  absl::StatusOr<std::unique_ptr<embedps::data::LineReader>> reader =
      embedps::data::LineReader::Open(path, max_line_bytes);
  if (!reader.ok()) return 0;
  absl::string_view line;
  bool too_long = false;
  size_t bytes = 0;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line, &too_long);
    if (!more.ok() || !*more) break;
    // Every byte of the line is readable (ASAN sees a read past it).
    for (const char c : line) bytes += static_cast<unsigned char>(c);
    if (!too_long && line.size() > max_line_bytes) std::abort();
  }
  bool damaged = false;
  (void)embedps::data::CountLines(path, /*damaged_ok=*/true, &damaged);
  // Keeps the reads of every byte (an unused sum's loads could go).
  asm volatile("" : : "r"(bytes) : "memory");
  return 0;
}
