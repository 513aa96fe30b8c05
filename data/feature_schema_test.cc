#include "data/feature_schema.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "data/criteo_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::data {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Criteo's layout as a schema: label, 13 log1p counts, 26 hex ids.
FeatureSchemaSpec CriteoSpec() {
  FeatureSchemaSpec spec;
  spec.label = "0";
  for (int j = 0; j < kCriteoDense; ++j) {
    spec.dense.push_back({absl::StrCat(1 + j), DenseTransform::kLog1p});
  }
  for (int s = 0; s < kCriteoSlots; ++s) {
    FeatureSchemaSpec::Sparse sparse;
    sparse.column = absl::StrCat(1 + kCriteoDense + s);
    sparse.id_format = IdFormat::kHex;
    spec.sparse.push_back(sparse);
  }
  return spec;
}

std::string CriteoLine(int variant) {
  std::string line = variant % 2 == 0 ? "1" : "0";
  for (int j = 0; j < kCriteoDense; ++j) {
    line +=
        (j + variant) % 5 == 0 ? "\t" : absl::StrCat("\t", j * 7 - 3 + variant);
  }
  for (int s = 0; s < kCriteoSlots; ++s) {
    line += (s + variant) % 7 == 0
                ? "\t"
                : absl::StrCat("\t", absl::Hex(uint32_t{0x9e3779b9} * (s + 1) *
                                               (variant + 3)));
  }
  return line;
}

// The Criteo layout given as a schema makes the same features and keys
// as CriteoReader.
TEST(FeatureSchemaTest, CriteoAsASchemaMatchesTheCriteoParser) {
  ASSERT_OK_AND_ASSIGN(const FeatureSchema schema,
                       ResolveFeatureSchema(CriteoSpec()));
  SchemaBatch batch;
  batch.Reset(schema);
  CriteoBatch criteo;
  criteo.labels.resize(8);
  criteo.dense.resize(8 * kCriteoDense);
  criteo.keys.resize(8 * kCriteoSlots);
  for (int i = 0; i < 8; ++i) {
    const std::string line = CriteoLine(i);
    ASSERT_OK(ParseCriteoLine(line.data(), line.size(), &criteo, i));
    ASSERT_OK(ParseSchemaLine(schema, line, &batch));
  }
  ASSERT_EQ(batch.size, 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(batch.labels[i], criteo.labels[i]);
    for (int j = 0; j < kCriteoDense; ++j) {
      EXPECT_EQ(batch.dense[i * kCriteoDense + j],
                criteo.dense[i * kCriteoDense + j]);
    }
    for (int s = 0; s < kCriteoSlots; ++s) {
      EXPECT_EQ(batch.slots[s].keys[i], criteo.keys[i * kCriteoSlots + s]);
      EXPECT_EQ(batch.slots[s].offsets[i + 1], i + 1);
    }
  }
}

FeatureSchemaSpec MultiSpec() {
  FeatureSchemaSpec spec;
  spec.header = true;
  spec.label = "label";
  spec.dense = {{"count", DenseTransform::kLog1p},
                {"price", DenseTransform::kStandardize}};
  FeatureSchemaSpec::Sparse user;
  user.column = "user";
  FeatureSchemaSpec::Sparse history;
  history.column = "history";
  history.multi_valued = true;
  history.max_values = 3;
  FeatureSchemaSpec::Sparse tags;
  tags.column = "tags";
  tags.multi_valued = true;
  tags.weighted = true;
  tags.id_format = IdFormat::kDecimal;
  spec.sparse = {user, history, tags};
  return spec;
}

constexpr char kHeader[] = "label\tprice\tuser\thistory\tcount\ttags\tunused";

TEST(FeatureSchemaTest, ListsWeightsAndNamesFromTheHeader) {
  ASSERT_OK_AND_ASSIGN(const FeatureSchema schema,
                       ResolveFeatureSchema(MultiSpec(), kHeader));
  EXPECT_EQ(schema.num_fields, 7);
  EXPECT_EQ(schema.label, 0);
  EXPECT_EQ(schema.dense[0].field, 4);
  EXPECT_EQ(schema.sparse[2].name, "tags");
  SchemaBatch batch;
  batch.Reset(schema);
  ParseCounts counts;
  ASSERT_OK(ParseSchemaLine(
      schema, "1\t9.5\tu1\ta,b,c,d,e\t3\t7:0.25,8:0.75\tx", &batch, &counts));
  ASSERT_OK(ParseSchemaLine(schema, "0\t\t\t\t\t\t\r", &batch, &counts));
  ASSERT_OK(
      ParseSchemaLine(schema, "0\t1\tu1\tb,,a\t0\t7:2\t", &batch, &counts));
  EXPECT_EQ(batch.size, 3);
  EXPECT_THAT(batch.labels, ElementsAre(1, 0, 0));
  EXPECT_FLOAT_EQ(batch.dense[0], std::log1p(3.0f));
  EXPECT_FLOAT_EQ(batch.dense[1], 9.5f);  // statistics not applied yet
  EXPECT_THAT(batch.dense[2], 0);         // empty fields are 0
  // One id a sample, the missing one a key of its own.
  EXPECT_THAT(batch.slots[0].offsets, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(batch.slots[0].keys[0], batch.slots[0].keys[2]);
  EXPECT_EQ(batch.slots[0].keys[1], MissingFeatureKey(0));
  // Lists: at most 3 ids (2 dropped), an empty list is an empty bag, and
  // empty items are skipped.
  EXPECT_THAT(batch.slots[1].offsets, ElementsAre(0, 3, 3, 5));
  EXPECT_EQ(counts.values_dropped, 2);
  EXPECT_EQ(batch.slots[1].keys[1], batch.slots[1].keys[3]);  // b
  EXPECT_EQ(batch.slots[1].keys[0], batch.slots[1].keys[4]);  // a
  // Weighted decimal ids.
  EXPECT_THAT(batch.slots[2].offsets, ElementsAre(0, 2, 2, 3));
  EXPECT_THAT(batch.slots[2].weights, ElementsAre(0.25f, 0.75f, 2.0f));
  EXPECT_EQ(batch.slots[2].keys[0], FeatureKey(2, 7));
  EXPECT_EQ(batch.slots[2].keys[2], FeatureKey(2, 7));
  // The same text in another column is another key.
  SchemaBatch other;
  other.Reset(schema);
  ASSERT_OK(ParseSchemaLine(schema, "1\t\ta\ta\t\t\t", &other));
  EXPECT_NE(other.slots[0].keys[0], other.slots[1].keys[0]);
  EXPECT_EQ(other.slots[1].keys[0], batch.slots[1].keys[0]);
}

// A prediction's lines: the training layout with the label taken out,
// wherever it stood; they parse to the labelled lines' features.
TEST(FeatureSchemaTest, WithoutLabelReadsTheLinesAPredictionGets) {
  FeatureSchemaSpec spec;
  spec.header = true;
  spec.label = "label";
  spec.dense = {{"n", DenseTransform::kLog1p}};
  spec.sparse.resize(2);
  spec.sparse[0].column = "u";
  spec.sparse[1].column = "tags";
  spec.sparse[1].multi_valued = true;
  ASSERT_OK_AND_ASSIGN(const FeatureSchema labelled,
                       ResolveFeatureSchema(spec, "u\tlabel\tn\ttags"));
  const FeatureSchema schema = WithoutLabel(labelled);
  EXPECT_EQ(schema.label, -1);
  EXPECT_EQ(schema.num_fields, 3);
  EXPECT_EQ(schema.header_line, "u\tn\ttags");
  EXPECT_EQ(schema.sparse[0].field, 0);
  EXPECT_EQ(schema.dense[0].field, 1);
  EXPECT_EQ(schema.sparse[1].field, 2);
  SchemaBatch with_label, without;
  with_label.Reset(labelled);
  without.Reset(schema);
  ASSERT_OK(ParseSchemaLine(labelled, "u7\t1\t3\ta,b", &with_label));
  ASSERT_OK(ParseSchemaLine(schema, "u7\t3\ta,b", &without));
  EXPECT_THAT(without.labels, ElementsAre(0));
  EXPECT_EQ(without.dense, with_label.dense);
  for (int s = 0; s < 2; ++s) {
    EXPECT_EQ(without.slots[s].keys, with_label.slots[s].keys);
    EXPECT_EQ(without.slots[s].offsets, with_label.slots[s].offsets);
  }
  // A line with the label left in has a field too many.
  EXPECT_THAT(ParseSchemaLine(schema, "u7\t1\t3\ta,b", &without),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("4 fields; the schema reads 3")));
  // Taken out twice: as once.
  EXPECT_EQ(WithoutLabel(schema).num_fields, 3);
  // A quoted header (R's write.csv) keeps its quotes, less the label's
  // name, and its names resolve unquoted.
  ASSERT_OK_AND_ASSIGN(
      const FeatureSchema quoted,
      ResolveFeatureSchema(spec, "\"u\"\t\"label\"\t\"n\"\t\"tags\""));
  EXPECT_EQ(quoted.label, 1);
  EXPECT_EQ(WithoutLabel(quoted).header_line, "\"u\"\t\"n\"\t\"tags\"");
  // By position (files may have more fields than the schema reads), a
  // prediction's line has exactly the fields up to the last one read.
  ASSERT_OK_AND_ASSIGN(const FeatureSchema criteo,
                       ResolveFeatureSchema(CriteoSpec()));
  const FeatureSchema unlabelled = WithoutLabel(criteo);
  SchemaBatch batch;
  batch.Reset(unlabelled);
  const std::string line = CriteoLine(1);
  const std::string features = line.substr(line.find('\t') + 1);
  ASSERT_OK(ParseSchemaLine(unlabelled, features, &batch));
  EXPECT_THAT(ParseSchemaLine(unlabelled, line, &batch),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("40 fields; the schema reads 39")));
}

// By position: the label in column 0, text ids in column 1.
FeatureSchema LabelAndTextId() {
  FeatureSchemaSpec spec;
  spec.label = "0";
  spec.sparse = {{"1"}};
  return ResolveFeatureSchema(spec).value();
}

// Keys of text ids are part of every checkpoint: their hash never
// changes.
TEST(FeatureSchemaTest, TextIdsHashTheSameEverywhere) {
  const FeatureSchema schema = LabelAndTextId();
  SchemaBatch batch;
  batch.Reset(schema);
  ASSERT_OK(ParseSchemaLine(schema, "1\titem_123456789", &batch));
  ASSERT_OK(ParseSchemaLine(schema, "1\tx", &batch));
  EXPECT_EQ(batch.slots[0].keys[0], uint64_t{3778370350273868726u});
  EXPECT_EQ(batch.slots[0].keys[1], uint64_t{417444273559878892u});
}

// Labels as writers spell them: pandas writes a float column's 1 as
// "1.0", R its logicals as TRUE/FALSE.
TEST(FeatureSchemaTest, LabelsReadInTheirCommonSpellings) {
  const FeatureSchema schema = LabelAndTextId();
  SchemaBatch batch;
  batch.Reset(schema);
  for (const char* label :
       {"1", "0", "1.0", "0.0", "-0", "1e0", "TRUE", "false", "True"}) {
    ASSERT_OK(ParseSchemaLine(schema, absl::StrCat(label, "\tx"), &batch))
        << label;
  }
  EXPECT_THAT(batch.labels, ElementsAre(1, 0, 1, 0, 0, 1, 1, 0, 1));
  EXPECT_FALSE(std::signbit(batch.labels[4]));
  for (const char* label : {"2", "0.5", "-1", "yes", "", "nan"}) {
    EXPECT_THAT(ParseSchemaLine(schema, absl::StrCat(label, "\tx"), &batch),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("is not 0 or 1")))
        << label;
  }
  EXPECT_EQ(batch.size, 9);
}

TEST(FeatureSchemaTest, ABadLineLeavesTheBatchAsItWas) {
  ASSERT_OK_AND_ASSIGN(const FeatureSchema schema,
                       ResolveFeatureSchema(MultiSpec(), kHeader));
  SchemaBatch batch;
  batch.Reset(schema);
  ASSERT_OK(ParseSchemaLine(schema, "1\t1\tu\ta,b\t2\t7:1\tx", &batch));
  const struct {
    std::string line;
    std::string error;
  } bad[] = {
      {"1\t1\tu\ta,b\t2\t7:1", "6 fields; the schema reads 7"},
      {"2\t1\tu\ta,b\t2\t7:1\tx", "label '2' is not 0 or 1"},
      {"1\tcheap\tu\ta,b\t2\t7:1\tx", "dense column price: 'cheap' is not a"},
      {"1\t1\tu\ta,b\t1e999\t7:1\tx",
       "dense column count: '1e999' is not a finite"},
      {"1\t1\tu\ta,b\tinf\t7:1\tx",
       "dense column count: 'inf' is not a finite"},
      {"1\t1\tu\ta,b\t2\t7:1,8\tx", "sparse column tags: '8' has no weight"},
      {"1\t1\tu\ta,b\t2\t7:1,8:x\tx", "sparse column tags: 'x' is not a"},
      {"1\t1\tu\ta,b\t2\t7:1,-8:1\tx",
       "sparse column tags: '-8' is not a decimal"},
      {"1\t1\tu\t\"a,b\t2\t7:1\tx", "column 3: its opening quote is not"},
      {"1\t1\t\"u\"v\ta,b\t2\t7:1\tx", "column 2: text after its closing"},
  };
  for (const auto& [line, error] : bad) {
    EXPECT_THAT(ParseSchemaLine(schema, line, &batch),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(error)))
        << line;
    EXPECT_EQ(batch.size, 1);
    EXPECT_EQ(batch.dense.size(), 2u);
    for (const SchemaBatch::Bags& bags : batch.slots) {
      EXPECT_EQ(bags.offsets.size(), 2u);
      EXPECT_EQ(bags.keys.size(), static_cast<size_t>(bags.offsets.back()));
    }
    EXPECT_EQ(batch.slots[2].weights.size(), 1u);
  }
}

TEST(FeatureSchemaTest, BadSchemasAreRefusedNamingTheColumn) {
  FeatureSchemaSpec spec = MultiSpec();
  EXPECT_THAT(ResolveFeatureSchema(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("header row; none was given")));
  spec.sparse[0].column = "nobody";
  EXPECT_THAT(ResolveFeatureSchema(spec, kHeader),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sparse 0: column 'nobody' is not in the "
                                 "header row")));
  spec = MultiSpec();
  spec.sparse[0].column = "count";
  EXPECT_THAT(
      ResolveFeatureSchema(spec, kHeader),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("used twice")));
  spec = MultiSpec();
  spec.sparse[0].weighted = true;
  EXPECT_THAT(ResolveFeatureSchema(spec, kHeader),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("set multi_valued too")));
  spec = MultiSpec();
  spec.list_separator = '\t';
  EXPECT_THAT(ResolveFeatureSchema(spec, kHeader),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("separators must differ")));
  spec = MultiSpec();
  spec.weight_separator = '"';
  EXPECT_THAT(ResolveFeatureSchema(spec, kHeader),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no separator may be '\"'")));
  EXPECT_THAT(ResolveFeatureSchema(MultiSpec(), "label\t\"price"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("the header row: column 1: its opening")));
  EXPECT_THAT(ResolveFeatureSchema(MultiSpec(), "label\tlabel"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("names column 'label' twice")));
  spec = CriteoSpec();
  spec.header = false;
  spec.dense[0].column = "count";
  EXPECT_THAT(ResolveFeatureSchema(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a 0-based position")));
  spec = CriteoSpec();
  spec.sparse.clear();
  EXPECT_THAT(ResolveFeatureSchema(spec),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no sparse column")));
}

// R's NA, Spark's null, Python's nan, Excel's #N/A: a dense value is
// missing, as an empty field is (0 after its transform), in training lines
// and in the statistics alike.
TEST(FeatureSchemaTest, MissingValueMarkersAreEmptyDenseFields) {
  ASSERT_OK_AND_ASSIGN(FeatureSchema schema,
                       ResolveFeatureSchema(MultiSpec(), kHeader));
  DenseStatistics statistics(schema);
  for (const char* price : {"10", "NA", "20", "null", "30", "NaN", "#N/A"}) {
    statistics.Add(absl::StrCat("1\t", price, "\tu\t\t1\t\tx"));
  }
  EXPECT_THAT(statistics.Apply(&schema), ElementsAre(0, 3));
  EXPECT_DOUBLE_EQ(schema.dense[1].mean, 20);
  SchemaBatch empty, marked;
  empty.Reset(schema);
  marked.Reset(schema);
  ASSERT_OK(ParseSchemaLine(schema, "1\t\tu\t\t\t\tx", &empty));
  for (const char* missing : {"NA", "N/A", "NaN", "nan", "-nan", "NULL", "null",
                              "None", "#N/A", "<NA>"}) {
    ASSERT_OK(ParseSchemaLine(
        schema, absl::StrCat("1\t", missing, "\tu\t\t", missing, "\t\tx"),
        &marked))
        << missing;
  }
  ASSERT_EQ(marked.size, 10);
  for (int i = 0; i < marked.size; ++i) {
    EXPECT_EQ(marked.dense[2 * i], empty.dense[0]);
    EXPECT_EQ(marked.dense[2 * i + 1], empty.dense[1]);
  }
  // Other words are still no numbers.
  EXPECT_THAT(ParseSchemaLine(schema, "1\tna\tu\t\t1\t\tx", &marked),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'na' is not a finite number")));
}

TEST(FeatureSchemaTest, StandardizeUsesTheDataStatistics) {
  ASSERT_OK_AND_ASSIGN(FeatureSchema schema,
                       ResolveFeatureSchema(MultiSpec(), kHeader));
  DenseStatistics statistics(schema);
  for (const char* price : {"10", "20", "30", "", "bad"}) {
    statistics.Add(absl::StrCat("1\t", price, "\tu\t\t1\t\tx"));
  }
  EXPECT_THAT(statistics.Apply(&schema), ElementsAre(0, 3));
  EXPECT_DOUBLE_EQ(schema.dense[1].mean, 20);
  EXPECT_DOUBLE_EQ(schema.dense[1].inv_std, 0.1);
  SchemaBatch batch;
  batch.Reset(schema);
  ASSERT_OK(ParseSchemaLine(schema, "1\t35\tu\t\t1\t\tx", &batch));
  EXPECT_FLOAT_EQ(batch.dense[1], 1.5f);
}

}  // namespace
}  // namespace embedps::data
