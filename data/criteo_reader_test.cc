#include "data/criteo_reader.h"

#include <zlib.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::data {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

// A valid line whose label is `label` and whose I1 is `i1`.
std::string Line(int label, int i1) {
  std::string line = absl::StrCat(label, "\t", i1);
  for (int j = 1; j < 13; ++j) absl::StrAppend(&line, "\t", j == 5 ? "" : "3");
  for (int s = 0; s < 26; ++s) {
    absl::StrAppend(&line, "\t", s == 7 ? "" : absl::StrCat("a0b", s));
  }
  return line;
}

std::string WriteFile(const std::string& name,
                      const std::vector<std::string>& lines) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path, std::ios::trunc);
  for (const std::string& l : lines) out << l << "\n";
  return path;
}

std::string WriteGzip(const std::string& name,
                      const std::vector<std::string>& lines) {
  const std::string path = ::testing::TempDir() + "/" + name;
  gzFile f = gzopen(path.c_str(), "wb");
  for (const std::string& l : lines) {
    gzwrite(f, l.data(), l.size());
    gzwrite(f, "\n", 1);
  }
  gzclose(f);
  return path;
}

std::vector<CriteoBatch> ReadAll(CriteoReader& reader) {
  std::vector<CriteoBatch> batches;
  while (true) {
    absl::StatusOr<std::optional<CriteoBatch>> next = reader.Next();
    EXPECT_OK(next.status());
    if (!next.ok() || !next->has_value()) break;
    batches.push_back(std::move(**next));
  }
  return batches;
}

TEST(ParseCriteoLineTest, FieldsAndTransforms) {
  CriteoBatch batch;
  batch.labels.resize(1);
  batch.dense.resize(13);
  batch.keys.resize(26);
  std::string line = Line(1, 7);
  line.replace(line.find("\t7\t"), 3, "\t-2\t");
  ASSERT_OK(ParseCriteoLine(line.data(), line.size(), &batch, 0));
  EXPECT_EQ(batch.labels[0], 1.0f);
  EXPECT_EQ(batch.dense[0], 0.0f);  // negative → log1p(0)
  EXPECT_FLOAT_EQ(batch.dense[1], std::log1p(3.0f));
  EXPECT_EQ(batch.dense[5], 0.0f);  // empty
  EXPECT_EQ(batch.keys[0], FeatureKey(0, 0xa0b0));
  EXPECT_EQ(batch.keys[7], MissingFeatureKey(7));
  // The same value in two slots is two keys.
  EXPECT_NE(FeatureKey(1, 5), FeatureKey(2, 5));
}

TEST(ParseCriteoLineTest, MalformedLinesSayWhy) {
  CriteoBatch batch;
  batch.labels.resize(1);
  batch.dense.resize(13);
  batch.keys.resize(26);
  const auto parse = [&](std::string line) {
    return ParseCriteoLine(line.data(), line.size(), &batch, 0);
  };
  EXPECT_THAT(parse("1\t2\t3"), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("3 tab-separated")));
  EXPECT_THAT(
      parse(Line(1, 1) + "\textra"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 40")));
  std::string bad_int = Line(0, 1);
  bad_int.replace(bad_int.find("\t1\t"), 3, "\tx1\t");
  EXPECT_THAT(parse(bad_int), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("I1 is 'x1'")));
  std::string bad_label = Line(0, 1);
  bad_label[0] = '2';
  EXPECT_THAT(parse(bad_label),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("label")));
  std::string bad_hex = Line(0, 1);
  bad_hex.replace(bad_hex.find("a0b3"), 4, "zz");
  EXPECT_THAT(parse(bad_hex), StatusIs(absl::StatusCode::kInvalidArgument,
                                       HasSubstr("C4 'zz' is not hex")));
  EXPECT_THAT(parse(""), StatusIs(absl::StatusCode::kInvalidArgument));
  // Control characters in a quoted field are shown, not swallowed.
  std::string hidden = Line(0, 1);
  hidden.replace(hidden.find("a0b3"), 4, std::string("a0\x01", 3) + "b");
  EXPECT_THAT(parse(hidden), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("C4 'a0\\001b' is not hex")));
}

// A file written on Windows: every line ends in "\r\n". The '\r' is not
// part of the last field.
TEST(ParseCriteoLineTest, WindowsLineEndingsAreAccepted) {
  CriteoBatch a, b;
  for (CriteoBatch* batch : {&a, &b}) {
    batch->labels.resize(1);
    batch->dense.resize(13);
    batch->keys.resize(26);
  }
  const std::string unix_line = Line(1, 7);
  const std::string windows_line = unix_line + "\r";
  ASSERT_OK(ParseCriteoLine(unix_line.data(), unix_line.size(), &a, 0));
  ASSERT_OK(ParseCriteoLine(windows_line.data(), windows_line.size(), &b, 0));
  EXPECT_EQ(a.keys, b.keys);
  EXPECT_EQ(a.dense, b.dense);
  // A '\r' anywhere else is still refused, and the message shows it.
  std::string inner = Line(1, 7);
  inner.replace(inner.find("a0b3"), 4, "a0b3\r");
  EXPECT_THAT(ParseCriteoLine(inner.data(), inner.size(), &a, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("C4 'a0b3\\r' is not hex")));
}

TEST(CriteoReaderTest, WorkersSplitEveryStepAndDropTheTail) {
  std::vector<std::string> lines;
  for (int i = 0; i < 23; ++i) lines.push_back(Line(i % 2, i));
  const std::string path = WriteFile("split.txt", lines);
  std::multiset<float> seen;
  for (int worker = 0; worker < 2; ++worker) {
    CriteoReaderOptions options;
    options.files = {path};
    options.batch_size = 5;
    options.worker_index = worker;
    options.num_workers = 2;
    ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
    EXPECT_EQ(reader->total_lines(), 23);
    EXPECT_EQ(reader->steps_per_epoch(), 2);  // 23 / (2 × 5)
    const std::vector<CriteoBatch> batches = ReadAll(*reader);
    ASSERT_EQ(batches.size(), 2u);
    for (int step = 0; step < 2; ++step) {
      EXPECT_EQ(batches[step].step, step);
      ASSERT_EQ(batches[step].size, 5);
      for (int i = 0; i < 5; ++i) {
        // I1 = the line number: step t of worker w is lines
        // [10t + 5w, 10t + 5w + 5).
        const float i1 = batches[step].dense[i * kCriteoDense];
        EXPECT_FLOAT_EQ(i1, std::log1p(10.0f * step + 5 * worker + i));
        seen.insert(i1);
      }
    }
  }
  EXPECT_EQ(seen.size(), 20u);  // each of the first 20 lines exactly once
}

TEST(CriteoReaderTest, IncludeTailDeliversThePartialLastStep) {
  std::vector<std::string> lines;
  for (int i = 0; i < 11; ++i) lines.push_back(Line(1, i));
  CriteoReaderOptions options;
  options.files = {WriteFile("tail.txt", lines)};
  options.batch_size = 4;
  options.include_tail = true;
  ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  EXPECT_EQ(reader->steps_per_epoch(), 3);
  const std::vector<CriteoBatch> batches = ReadAll(*reader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].size, 3);
  options.num_workers = 2;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(CriteoReaderTest, GzipReadsLikePlainAndEpochsRepeat) {
  std::vector<std::string> lines;
  for (int i = 0; i < 8; ++i) lines.push_back(Line(1, i));
  CriteoReaderOptions options;
  options.files = {WriteGzip("data.txt.gz", lines)};
  options.batch_size = 4;
  options.epochs = 2;
  ASSERT_OK_AND_ASSIGN(auto gz, CriteoReader::Open(options));
  options.files = {WriteFile("data.txt", lines)};
  ASSERT_OK_AND_ASSIGN(auto plain, CriteoReader::Open(options));
  const std::vector<CriteoBatch> a = ReadAll(*gz), b = ReadAll(*plain);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, static_cast<int64_t>(i));
    EXPECT_EQ(a[i].dense, b[i].dense);
    EXPECT_EQ(a[i].keys, b[i].keys);
  }
  EXPECT_EQ(a[0].dense, a[2].dense);  // epoch 2 repeats epoch 1
}

TEST(CriteoReaderTest, BadLinesAreSkippedOrFatal) {
  std::vector<std::string> lines;
  for (int i = 0; i < 8; ++i) lines.push_back(Line(0, i));
  lines[2] = "1\tnot\tenough";
  lines[5] = Line(0, 5) + std::string(5000, 'x');  // over max_line_bytes
  const std::string path = WriteFile("bad.txt", lines);
  CriteoReaderOptions options;
  options.files = {path};
  options.batch_size = 4;
  ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  const std::vector<CriteoBatch> batches = ReadAll(*reader);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].size, 3);  // line 3 (1-based) left out
  EXPECT_EQ(batches[1].size, 3);  // line 6 left out
  EXPECT_EQ(reader->stats().bad_lines, 2);
  EXPECT_EQ(reader->stats().lines_parsed, 8);

  options.fatal_bad_lines = true;
  ASSERT_OK_AND_ASSIGN(auto fatal, CriteoReader::Open(options));
  absl::StatusOr<std::optional<CriteoBatch>> next = fatal->Next();
  EXPECT_THAT(next, StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr(path + ":3")));
  EXPECT_THAT(fatal->Next(), StatusIs(absl::StatusCode::kInvalidArgument));
}

// Evaluation reads what a small test set holds, even less than a batch.
TEST(CriteoReaderTest, IncludeTailReadsAFileShorterThanABatch) {
  std::vector<std::string> lines;
  for (int i = 0; i < 5; ++i) lines.push_back(Line(i % 2, i));
  CriteoReaderOptions options;
  options.files = {WriteFile("small_test.txt", lines)};
  options.batch_size = 4096;
  options.include_tail = true;
  ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  EXPECT_EQ(reader->total_steps(), 1);
  const std::vector<CriteoBatch> batches = ReadAll(*reader);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].size, 5);
  // An empty file still has nothing to evaluate.
  options.files = {WriteFile("empty_test.txt", {})};
  EXPECT_THAT(
      CriteoReader::Open(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hold 0 lines")));
}

TEST(CriteoReaderTest, WindowsFilesReadLikeUnixFiles) {
  std::vector<std::string> lines, windows;
  for (int i = 0; i < 8; ++i) {
    lines.push_back(Line(i % 2, i));
    windows.push_back(Line(i % 2, i) + "\r");
  }
  CriteoReaderOptions options;
  options.batch_size = 4;
  options.files = {WriteFile("unix.txt", lines)};
  ASSERT_OK_AND_ASSIGN(auto unix_reader, CriteoReader::Open(options));
  options.files = {WriteGzip("windows.txt.gz", windows)};
  ASSERT_OK_AND_ASSIGN(auto windows_reader, CriteoReader::Open(options));
  const std::vector<CriteoBatch> a = ReadAll(*unix_reader);
  const std::vector<CriteoBatch> b = ReadAll(*windows_reader);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].keys, b[i].keys);
  EXPECT_EQ(windows_reader->stats().bad_lines, 0);
}

// A gzip file cut short (a copy that did not finish) is not trained on
// silently: its damaged end counts as a bad line, or is fatal.
// A truncated gzip file is an error by default (a job must not train on
// part of its data and exit 0); asked to, the reader takes what is there
// and counts the damage as one bad line.
TEST(CriteoReaderTest, TruncatedGzipIsAnErrorOrABadLine) {
  std::vector<std::string> lines;
  for (int i = 0; i < 5000; ++i) lines.push_back(Line(i % 2, i));
  const std::string whole = WriteGzip("whole.txt.gz", lines);
  std::ifstream in(whole, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 10000u);
  const std::string cut = ::testing::TempDir() + "/cut.txt.gz";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, 10000);

  CriteoReaderOptions options;
  options.files = {cut};
  options.batch_size = 16;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("malformed file " + cut),
                             HasSubstr("ends early"))));

  options.damaged_files_are_bad_lines = true;
  ASSERT_OK_AND_ASSIGN(auto reader, CriteoReader::Open(options));
  EXPECT_GT(reader->total_lines(), 0);
  EXPECT_LT(reader->total_lines(), 5000);
  ReadAll(*reader);
  EXPECT_EQ(reader->stats().bad_lines, 1);

  options.fatal_bad_lines = true;
  EXPECT_THAT(
      CriteoReader::Open(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ends early")));
}

TEST(CriteoReaderTest, BadOptionsAndMissingFiles) {
  CriteoReaderOptions options;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options.files = {::testing::TempDir() + "/does-not-exist.txt"};
  EXPECT_THAT(
      CriteoReader::Open(options),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("does-not-exist")));
  options.files = {WriteFile("short.txt", {Line(0, 1)})};
  options.batch_size = 2;
  EXPECT_THAT(CriteoReader::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("fewer than one step")));
}

}  // namespace
}  // namespace embedps::data
