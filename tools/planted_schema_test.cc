#include "tools/planted_schema.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_matchers.h"
#include "dense/eval_metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::tools {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

PlantedSchema Make(PlantedSchemaOptions options = {}) {
  absl::StatusOr<PlantedSchema> schema = PlantedSchema::Create(options);
  EXPECT_OK(schema);
  return *std::move(schema);
}

TEST(PlantedSchemaTest, TheSameOptionsGiveTheSameLines) {
  PlantedSchema a = Make(), b = Make();
  PlantedSchemaOptions other;
  other.seed = 2;
  PlantedSchema c = Make(other);
  bool differs = false;
  for (int i = 0; i < 200; ++i) {
    const std::string line = a.Next().line;
    EXPECT_EQ(line, b.Next().line);
    differs = differs || line != c.Next().line;
  }
  EXPECT_TRUE(differs);
}

// Every column has the shape its kind says, lists are as long as asked,
// and each line's planted probability is recovered from the line alone.
TEST(PlantedSchemaTest, LinesHaveTheirColumnsAndTheirProbability) {
  PlantedSchemaOptions options;
  options.missing = 0.1;
  PlantedSchema schema = Make(options);
  EXPECT_EQ(schema.Header(),
            "label\ti0\ti1\ti2\ti3\tr0\ts0\ts1\ts2\ts3\ts4\ts5\tm0\tm1\tm2\tw0"
            "\n");
  int64_t list_items = 0, lists = 0, missing = 0, fields = 0;
  for (int i = 0; i < 5000; ++i) {
    const PlantedSchema::Sample sample = schema.Next();
    ASSERT_EQ(sample.line.back(), '\n');
    const std::vector<std::string> columns =
        absl::StrSplit(sample.line.substr(0, sample.line.size() - 1), '\t');
    ASSERT_EQ(columns.size(), 16u) << sample.line;
    EXPECT_EQ(columns[0], sample.label == 1 ? "1" : "0");
    for (size_t c = 1; c < columns.size(); ++c) {
      ++fields;
      if (columns[c].empty()) {
        ++missing;
        continue;
      }
      const std::vector<std::string> items = absl::StrSplit(columns[c], ',');
      if (c >= 12) {  // lists and the weighted list
        ++lists;
        list_items += static_cast<int64_t>(items.size());
        EXPECT_LE(items.size(), 32u);
      } else {
        EXPECT_EQ(items.size(), 1u) << columns[c];
      }
      if (c == 15) {
        double sum = 0;
        for (const std::string& item : items) {
          const std::vector<std::string> parts = absl::StrSplit(item, ':');
          ASSERT_EQ(parts.size(), 2u) << item;
          EXPECT_EQ(parts[0].size(), 8u);
          sum += std::stod(parts[1]);
        }
        EXPECT_NEAR(sum, 1.0, 0.002 * items.size());
      }
    }
    ASSERT_OK_AND_ASSIGN(const double probability,
                         schema.Probability(sample.line));
    EXPECT_EQ(probability, sample.probability) << sample.line;
  }
  EXPECT_NEAR(static_cast<double>(list_items) / lists, 4.0, 0.2);
  EXPECT_NEAR(static_cast<double>(missing) / fields, 0.1, 0.01);
}

// The planted probabilities carry signal (the Bayes AUC is well above
// chance and below certainty) and the labels follow them.
TEST(PlantedSchemaTest, LabelsFollowThePlantedProbabilities) {
  PlantedSchema schema = Make();
  std::vector<float> probability, label;
  double expected_positives = 0;
  for (int i = 0; i < 20000; ++i) {
    const PlantedSchema::Sample sample = schema.Next();
    probability.push_back(static_cast<float>(sample.probability));
    label.push_back(static_cast<float>(sample.label));
    expected_positives += sample.probability;
  }
  double positives = 0;
  for (float l : label) positives += l;
  EXPECT_NEAR(positives / 20000, expected_positives / 20000, 0.01);
  const double auc = dense::RocAuc(probability, label);
  EXPECT_GT(auc, 0.65);
  EXPECT_LT(auc, 0.95);
}

TEST(PlantedSchemaTest, CsvUsesItsSeparators) {
  PlantedSchemaOptions options;
  options.column_separator = ',';
  options.list_separator = '|';
  options.missing = 0;
  PlantedSchema schema = Make(options);
  EXPECT_EQ(schema.Header().substr(0, 12), "label,i0,i1,");
  const PlantedSchema::Sample sample = schema.Next();
  EXPECT_EQ(std::count(sample.line.begin(), sample.line.end(), ','), 15);
  ASSERT_OK_AND_ASSIGN(const double probability,
                       schema.Probability(sample.line));
  EXPECT_EQ(probability, sample.probability);
}

TEST(PlantedSchemaTest, BadOptionsAndLinesAreRefused) {
  PlantedSchemaOptions options;
  options.singles = 1;
  options.lists = 0;
  options.weighted_lists = 0;
  EXPECT_THAT(
      PlantedSchema::Create(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 2")));
  options = {};
  options.list_separator = '\t';
  EXPECT_THAT(
      PlantedSchema::Create(options).status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("separators")));
  options = {};
  options.vocab = {0};
  EXPECT_THAT(PlantedSchema::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab")));
  PlantedSchema schema = Make();
  EXPECT_THAT(
      schema.Probability("1\t2\t3\n"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 fields")));
  std::string line = schema.Next().line;
  // A token no column has: the first id column's field replaced.
  std::vector<std::string> columns =
      absl::StrSplit(line.substr(0, line.size() - 1), '\t');
  columns[6] = "zzzzzzzz";
  EXPECT_THAT(
      schema.Probability(absl::StrJoin(columns, "\t")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("column s0")));
}

}  // namespace
}  // namespace embedps::tools
