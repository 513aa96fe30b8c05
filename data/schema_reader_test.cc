#include "data/schema_reader.h"

#include <zlib.h>
#include <zstd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/child_process.h"

namespace embedps::data {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// schema_datagen's files in a directory of their own.
std::string Generate(const std::string& name, const std::string& format) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  absl::StatusOr<std::string> binary =
      embedps::testing::LocateBinary("", "tools/schema_datagen");
  EXPECT_OK(binary);
  auto child = embedps::testing::ChildProcess::Spawn(
      *binary, {"--output_dir=" + dir, "--train_rows=3000", "--test_rows=500",
                "--format=" + format});
  EXPECT_OK(child);
  EXPECT_EQ((*child)->Wait(), 0);
  return dir;
}

// The columns schema_datagen writes, as a schema.
FeatureSchemaSpec GeneratedSpec(char column, char list) {
  FeatureSchemaSpec spec;
  spec.column_separator = column;
  spec.list_separator = list;
  spec.header = true;
  spec.label = "label";
  for (int j = 0; j < 4; ++j) {
    spec.dense.push_back({absl::StrCat("i", j), DenseTransform::kLog1p});
  }
  spec.dense.push_back({"r0", DenseTransform::kStandardize});
  for (int j = 0; j < 6; ++j) spec.sparse.push_back({absl::StrCat("s", j)});
  for (int j = 0; j < 3; ++j) {
    FeatureSchemaSpec::Sparse list_column;
    list_column.column = absl::StrCat("m", j);
    list_column.multi_valued = true;
    spec.sparse.push_back(list_column);
  }
  FeatureSchemaSpec::Sparse weighted;
  weighted.column = "w0";
  weighted.multi_valued = true;
  weighted.weighted = true;
  spec.sparse.push_back(weighted);
  return spec;
}

// Two workers read schema_datagen's TSV: every sample once, in equal
// steps; lists are bags of their length, the weights sum to 1 a bag, and
// the standardized column has mean 0 and deviation 1 on the training data.
TEST(SchemaReaderTest, ReadsGeneratedColumnsAcrossWorkers) {
  const std::string dir = Generate("tsv", "tsv");
  const FeatureSchemaSpec spec = GeneratedSpec('\t', ',');
  ASSERT_OK_AND_ASSIGN(
      const FeatureSchema schema,
      PrepareFeatureSchema(spec, {dir + "/train.tsv"}, 100000));
  EXPECT_NE(schema.dense[4].inv_std, 1.0);
  int64_t samples = 0, list_items = 0, lists = 0;
  double sum = 0, square_sum = 0;
  for (int worker = 0; worker < 2; ++worker) {
    BatchReaderOptions options;
    options.files = {dir + "/train.tsv"};
    options.header = true;
    options.batch_size = 100;
    options.worker_index = worker;
    options.num_workers = 2;
    options.fatal_bad_lines = true;
    ASSERT_OK_AND_ASSIGN(auto reader,
                         SchemaReader::Open(options, SchemaFormat(schema)));
    EXPECT_EQ(reader->total_lines(), 3000);
    EXPECT_EQ(reader->total_steps(), 15);
    int64_t steps = 0;
    while (true) {
      ASSERT_OK_AND_ASSIGN(std::optional<SchemaBatch> batch, reader->Next());
      if (!batch.has_value()) break;
      EXPECT_EQ(batch->step, steps++);
      ASSERT_EQ(batch->size, 100);
      samples += batch->size;
      for (int i = 0; i < batch->size; ++i) {
        const double x = batch->dense[i * 5 + 4];
        sum += x;
        square_sum += x * x;
      }
      for (size_t s = 6; s < 10; ++s) {
        const SchemaBatch::Bags& bags = batch->slots[s];
        ASSERT_EQ(bags.offsets.size(), 101u);
        for (int i = 0; i < batch->size; ++i) {
          const int length = bags.offsets[i + 1] - bags.offsets[i];
          if (length == 0) continue;  // missing
          ++lists;
          list_items += length;
          if (s == 9) {
            double weights = 0;
            for (int k = bags.offsets[i]; k < bags.offsets[i + 1]; ++k) {
              weights += bags.weights[k];
            }
            EXPECT_NEAR(weights, 1.0, 0.002 * length);
          }
        }
      }
    }
    EXPECT_EQ(steps, 15);
    EXPECT_EQ(reader->stats().bad_lines, 0);
  }
  EXPECT_EQ(samples, 3000);
  EXPECT_NEAR(static_cast<double>(list_items) / lists, 4.0, 0.25);
  // The statistics come from the same lines: about 0 and 1 (empty fields
  // read as 0).
  EXPECT_NEAR(sum / samples, 0.0, 0.05);
  EXPECT_NEAR(square_sum / samples, 0.95, 0.06);
}

TEST(SchemaReaderTest, CsvWithItsSeparatorsGzipAndZstd) {
  const std::string dir = Generate("csv", "csv");
  const FeatureSchemaSpec spec = GeneratedSpec(',', '|');
  // The same file, gzipped: read alike.
  std::ifstream in(dir + "/test.csv", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  const std::string gz = dir + "/test.csv.gz";
  gzFile out = gzopen(gz.c_str(), "wb");
  gzwrite(out, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(out);
  // And zstd (a name that does not say so: told by content).
  const std::string zst = dir + "/test.csv.compressed";
  std::string compressed_zstd(ZSTD_compressBound(bytes.size()), '\0');
  compressed_zstd.resize(ZSTD_compress(compressed_zstd.data(),
                                       compressed_zstd.size(), bytes.data(),
                                       bytes.size(), 3));
  std::ofstream(zst, std::ios::binary) << compressed_zstd;
  ASSERT_OK_AND_ASSIGN(
      const FeatureSchema schema,
      PrepareFeatureSchema(spec, {dir + "/train.csv"}, 100000));
  std::vector<std::vector<uint64_t>> keys;
  for (const std::string& file : {dir + "/test.csv", gz, zst}) {
    BatchReaderOptions options;
    options.files = {file};
    options.header = true;
    options.batch_size = 500;
    options.fatal_bad_lines = true;
    ASSERT_OK(CheckHeaders(schema, {file}));
    ASSERT_OK_AND_ASSIGN(auto reader,
                         SchemaReader::Open(options, SchemaFormat(schema)));
    ASSERT_OK_AND_ASSIGN(std::optional<SchemaBatch> batch, reader->Next());
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->size, 500);
    keys.push_back(batch->slots[7].keys);
  }
  EXPECT_EQ(keys[0], keys[1]);
  EXPECT_EQ(keys[0], keys[2]);
  EXPECT_FALSE(keys[0].empty());

  // A truncated gzip file is an error (a job must not train on part of
  // its data and exit 0).
  const std::string cut = dir + "/cut.csv.gz";
  std::ifstream whole(gz, std::ios::binary);
  const std::string compressed((std::istreambuf_iterator<char>(whole)),
                               std::istreambuf_iterator<char>());
  std::ofstream(cut, std::ios::binary)
      << compressed.substr(0, compressed.size() / 2);
  BatchReaderOptions options;
  options.files = {cut};
  options.header = true;
  options.batch_size = 10;
  EXPECT_THAT(
      SchemaReader::Open(options, SchemaFormat(schema)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ends early")));
}

// What R's write.csv and Excel's "CSV UTF-8" write — a byte-order mark,
// quoted header names and text fields, CRLF endings, Spark's "" for an
// empty field — reads as the same data written by pandas with minimal
// quoting.
TEST(SchemaReaderTest, QuotedCsvWithAByteOrderMarkReadsAsPlainCsv) {
  const std::string dir = ::testing::TempDir() + "/quoted";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/plain.csv")
      << "label,count,item,hist\n1,3,a1,x|y\n0,,\"b,2\",\n"
         "1,7,\"say \"\"hi\"\"\",z\n";
  std::ofstream(dir + "/r.csv")
      << "\xEF\xBB\xBF\"label\",\"count\",\"item\",\"hist\"\r\n"
         "1,3,\"a1\",\"x|y\"\r\n0,,\"b,2\",\"\"\r\n"
         "1,7,\"say \"\"hi\"\"\",\"z\"\r\n";
  FeatureSchemaSpec spec;
  spec.column_separator = ',';
  spec.list_separator = '|';
  spec.header = true;
  spec.label = "label";
  spec.dense = {{"count", DenseTransform::kNone}};
  spec.sparse = {{"item"}};
  FeatureSchemaSpec::Sparse hist;
  hist.column = "hist";
  hist.multi_valued = true;
  spec.sparse.push_back(hist);
  std::vector<SchemaBatch> batches;
  for (const char* name : {"plain.csv", "r.csv"}) {
    const std::string file = dir + "/" + name;
    ASSERT_OK_AND_ASSIGN(const FeatureSchema schema,
                         PrepareFeatureSchema(spec, {file}, 10));
    BatchReaderOptions options;
    options.files = {file};
    options.header = true;
    options.batch_size = 3;
    options.fatal_bad_lines = true;
    ASSERT_OK_AND_ASSIGN(auto reader,
                         SchemaReader::Open(options, SchemaFormat(schema)));
    ASSERT_OK_AND_ASSIGN(std::optional<SchemaBatch> batch, reader->Next());
    ASSERT_TRUE(batch.has_value()) << name;
    ASSERT_EQ(batch->size, 3) << name;
    batches.push_back(*std::move(batch));
  }
  EXPECT_EQ(batches[0].labels, batches[1].labels);
  EXPECT_EQ(batches[0].dense, batches[1].dense);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(batches[0].slots[s].keys, batches[1].slots[s].keys) << s;
    EXPECT_EQ(batches[0].slots[s].offsets, batches[1].slots[s].offsets) << s;
  }
  // "x|y", an empty list, "z"; three distinct items.
  EXPECT_THAT(batches[0].slots[1].offsets, ElementsAre(0, 2, 2, 3));
  const std::vector<uint64_t>& items = batches[0].slots[0].keys;
  ASSERT_EQ(items.size(), 3u);
  EXPECT_NE(items[0], items[1]);
  EXPECT_NE(items[1], items[2]);
}

// Long multi-hot lines (lists of hundreds of ids) are samples like any
// other; past max_line_bytes a line is malformed, named and counted.
TEST(SchemaReaderTest, LongListsAreReadWholeUpToTheLineBound) {
  const std::string dir = ::testing::TempDir() + "/long";
  std::filesystem::create_directories(dir);
  std::string line = "1\t";
  for (int i = 0; i < 2000; ++i) {
    absl::StrAppend(&line, i == 0 ? "" : ",", "item_", i * 7919);
  }
  ASSERT_GT(line.size(), 20000u);
  std::ofstream(dir + "/long.tsv") << line << "\n" << line << "\n0\tx\n";
  FeatureSchemaSpec spec;
  spec.label = "0";
  FeatureSchemaSpec::Sparse history;
  history.column = "1";
  history.multi_valued = true;
  history.max_values = 5000;
  spec.sparse = {history};
  ASSERT_OK_AND_ASSIGN(const FeatureSchema schema, ResolveFeatureSchema(spec));
  BatchReaderOptions options;
  options.files = {dir + "/long.tsv"};
  options.batch_size = 3;
  ASSERT_OK_AND_ASSIGN(auto reader,
                       SchemaReader::Open(options, SchemaFormat(schema)));
  ASSERT_OK_AND_ASSIGN(std::optional<SchemaBatch> batch, reader->Next());
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->size, 3);
  EXPECT_THAT(batch->slots[0].offsets, ElementsAre(0, 2000, 4000, 4001));
  EXPECT_EQ(reader->stats().bad_lines, 0);

  options.max_line_bytes = 10000;
  options.fatal_bad_lines = true;
  ASSERT_OK_AND_ASSIGN(reader,
                       SchemaReader::Open(options, SchemaFormat(schema)));
  EXPECT_THAT(reader->Next(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("long.tsv:1: line longer than 10000 bytes")));
}

TEST(SchemaReaderTest, FilesWithAnotherHeaderAreRefused) {
  const std::string dir = ::testing::TempDir() + "/headers";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a.tsv") << "label\tx\n1\tu\n";
  std::ofstream(dir + "/b.tsv") << "label\ty\n1\tu\n";
  FeatureSchemaSpec spec;
  spec.header = true;
  spec.label = "label";
  spec.sparse = {{"x"}};
  EXPECT_THAT(PrepareFeatureSchema(spec, {dir + "/a.tsv", dir + "/b.tsv"}, 10),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(dir + "/b.tsv: its header row 'label\\ty' "
                                       "is not the schema's ('label\\tx')")));
  ASSERT_OK_AND_ASSIGN(const FeatureSchema schema,
                       PrepareFeatureSchema(spec, {dir + "/a.tsv"}, 10));
  EXPECT_EQ(schema.sparse[0].field, 1);
}

}  // namespace
}  // namespace embedps::data
