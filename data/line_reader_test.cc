#include "data/line_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::data {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string Path(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

std::string Write(const std::string& name, const std::string& bytes) {
  std::ofstream(Path(name), std::ios::binary) << bytes;
  return Path(name);
}

std::string Zstd(const std::string& text, int level = 3) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t size =
      ZSTD_compress(out.data(), out.size(), text.data(), text.size(), level);
  EXPECT_FALSE(ZSTD_isError(size));
  out.resize(size);
  return out;
}

// Every line of `path`, or the first error.
absl::StatusOr<std::vector<std::string>> Lines(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<LineReader> reader,
                   LineReader::Open(path, 1 << 20));
  std::vector<std::string> lines;
  absl::string_view line;
  bool too_long = false;
  while (true) {
    ASSIGN_OR_RETURN(const bool more, reader->Next(&line, &too_long));
    if (!more) return lines;
    lines.emplace_back(line);
  }
}

// Lines enough to span several of the reader's 1 MiB chunks.
std::string Text(std::vector<std::string>* lines) {
  std::string text;
  for (int i = 0; i < 150000; ++i) {
    lines->push_back(absl::StrCat(i % 2, "\t", i, "\titem", i * 7919 % 1000));
    absl::StrAppend(&text, lines->back(), "\n");
  }
  return text;
}

TEST(LineReaderTest, ZstdReadsAsPlainTextFrameAfterFrame) {
  std::vector<std::string> expected;
  const std::string text = Text(&expected);
  const std::string plain = Write("plain.txt", text);
  // Two frames, the way `cat a.zst b.zst` and parallel writers make them.
  const size_t half = text.size() / 2;
  const std::string zst =
      Write("two_frames.txt.zst",
            Zstd(text.substr(0, half)) + Zstd(text.substr(half)));
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> from_plain, Lines(plain));
  EXPECT_THAT(from_plain, ElementsAreArray(expected));
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> from_zstd, Lines(zst));
  EXPECT_THAT(from_zstd, ElementsAreArray(expected));
  // Told by content, not name.
  const std::string unnamed = Write("no_suffix", Zstd(text, 19));
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> from_unnamed,
                       Lines(unnamed));
  EXPECT_EQ(from_unnamed.size(), expected.size());
  bool damaged = false;
  ASSERT_OK_AND_ASSIGN(const int64_t count,
                       CountLines(zst, /*damaged_ok=*/false, &damaged));
  EXPECT_EQ(count, static_cast<int64_t>(expected.size()));
  EXPECT_FALSE(damaged);
}

TEST(LineReaderTest, ATruncatedOrCorruptZstdFileIsDataLoss) {
  std::vector<std::string> expected;
  const std::string compressed = Zstd(Text(&expected));
  const std::string cut =
      Write("cut.txt.zst", compressed.substr(0, compressed.size() / 2));
  EXPECT_THAT(Lines(cut), StatusIs(absl::StatusCode::kDataLoss,
                                   HasSubstr("the zstd stream ends early")));
  bool damaged = false;
  ASSERT_OK_AND_ASSIGN(const int64_t count,
                       CountLines(cut, /*damaged_ok=*/true, &damaged));
  EXPECT_TRUE(damaged);
  EXPECT_GT(count, 0);
  EXPECT_LT(count, static_cast<int64_t>(expected.size()));
  EXPECT_THAT(CountLines(cut, /*damaged_ok=*/false, &damaged),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("malformed file")));
  std::string flipped = compressed;
  for (size_t i = 20; i < flipped.size(); i += 97) flipped[i] ^= 0x5A;
  EXPECT_THAT(Lines(Write("flipped.txt.zst", flipped)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("the zstd stream does not decode")));
}

TEST(LineReaderTest, AByteOrderMarkOpeningAFileIsNotText) {
  ASSERT_OK_AND_ASSIGN(
      const std::vector<std::string> lines,
      Lines(Write("bom.csv", "\xEF\xBB\xBFlabel,x\r\n1,\xEF\xBB\xBFy\n")));
  // Only the file's own opening mark goes.
  EXPECT_THAT(lines, ElementsAreArray({"label,x\r", "1,\xEF\xBB\xBFy"}));
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> zstd_lines,
                       Lines(Write("bom.csv.zst", Zstd("\xEF\xBB\xBF"
                                                       "a\nb\n"))));
  EXPECT_THAT(zstd_lines, ElementsAreArray({"a", "b"}));
}

TEST(LineReaderTest, OtherCompressionsAreRefusedNamingTheRemedy) {
  EXPECT_THAT(LineReader::Open(Write("a.bz2", "BZh91AY&SY..."), 100),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is bzip2; the readers take text")));
  EXPECT_THAT(LineReader::Open(Write("a.xz", std::string("\xFD"
                                                         "7zXZ\0rest",
                                                         9)),
                               100),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is xz")));
  EXPECT_THAT(LineReader::Open(Write("a.parquet", "PAR1...."), 100),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is Parquet; the readers take text (TSV or "
                                 "CSV), plain or compressed with gzip or "
                                 "zstd: export it as CSV")));
  EXPECT_THAT(LineReader::Open(Path("nowhere.txt"), 100),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nowhere.txt")));
  // Short and empty files are plain text.
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> empty,
                       Lines(Write("empty.txt", "")));
  EXPECT_TRUE(empty.empty());
  ASSERT_OK_AND_ASSIGN(const std::vector<std::string> short_file,
                       Lines(Write("short.txt", "BZ")));
  EXPECT_THAT(short_file, ElementsAreArray({"BZ"}));
}

}  // namespace
}  // namespace embedps::data
