#include "worker/input_layout.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::worker {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

// label, a count (log1p), a price (standardized), a user id.
data::FeatureSchemaSpec Spec() {
  data::FeatureSchemaSpec spec;
  spec.header = true;
  spec.label = "label";
  spec.dense = {{"count", data::DenseTransform::kLog1p},
                {"price", data::DenseTransform::kStandardize}};
  spec.sparse.emplace_back();
  spec.sparse.back().column = "user";
  return spec;
}

constexpr char kHeader[] = "user\tprice\tlabel\tcount";

// The trainer's schema: resolved against its files' header, with the
// statistics of its data.
data::FeatureSchema Trained() {
  absl::StatusOr<data::FeatureSchema> schema =
      data::ResolveFeatureSchema(Spec(), kHeader);
  EXPECT_OK(schema.status());
  schema->dense[1].mean = 12.5;
  schema->dense[1].inv_std = 0.25;
  return *schema;
}

TEST(InputLayoutTest, ARecordedLayoutResolvesTheTrainersSchema) {
  const dense::InputLayout layout = InputLayoutOf(Trained());
  EXPECT_EQ(layout.header(), kHeader);
  ASSERT_EQ(layout.standardized_size(), 1);
  EXPECT_EQ(layout.standardized(0).column(), "price");

  ASSERT_OK_AND_ASSIGN(std::optional<data::FeatureSchema> schema,
                       SchemaOfModel(Spec(), layout));
  ASSERT_TRUE(schema.has_value());
  const data::FeatureSchema trained = Trained();
  EXPECT_EQ(schema->label, trained.label);
  ASSERT_EQ(schema->dense.size(), 2u);
  EXPECT_EQ(schema->dense[1].field, trained.dense[1].field);
  EXPECT_EQ(schema->dense[1].mean, 12.5);
  EXPECT_EQ(schema->dense[1].inv_std, 0.25);
  EXPECT_EQ(schema->dense[0].inv_std, 1);  // log1p: no statistics
  EXPECT_EQ(schema->sparse[0].field, trained.sparse[0].field);
}

// A model that recorded nothing (or only part of what the spec needs)
// leaves the schema to the training files.
TEST(InputLayoutTest, WhatALayoutLacksIsNotGuessed) {
  dense::InputLayout header_only;
  header_only.set_header(kHeader);
  dense::InputLayout no_header = InputLayoutOf(Trained());
  no_header.clear_header();
  for (const dense::InputLayout& layout :
       {dense::InputLayout(), header_only, no_header}) {
    ASSERT_OK_AND_ASSIGN(std::optional<data::FeatureSchema> schema,
                         SchemaOfModel(Spec(), layout));
    EXPECT_FALSE(schema.has_value()) << layout.DebugString();
  }
  // A positional schema without STANDARDIZE needs nothing recorded.
  data::FeatureSchemaSpec positional;
  positional.label = "0";
  positional.dense = {{"1", data::DenseTransform::kLog1p}};
  positional.sparse.emplace_back();
  positional.sparse.back().column = "2";
  ASSERT_OK_AND_ASSIGN(std::optional<data::FeatureSchema> schema,
                       SchemaOfModel(positional, dense::InputLayout()));
  EXPECT_TRUE(schema.has_value());
}

// Statistics of other columns than the schema standardizes are refused,
// naming both lists, and change nothing.
TEST(InputLayoutTest, StatisticsOfOtherColumnsAreRefused) {
  dense::InputLayout layout = InputLayoutOf(Trained());
  layout.mutable_standardized(0)->set_column("cost");
  data::FeatureSchema schema = Trained();
  EXPECT_THAT(UseRecordedStatistics(layout, &schema),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("[cost]; this schema standardizes [price]")));
  EXPECT_EQ(schema.dense[1].mean, 12.5);
  EXPECT_THAT(SchemaOfModel(Spec(), layout),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // A header that lacks a column the spec names: as ResolveFeatureSchema.
  dense::InputLayout other_header = InputLayoutOf(Trained());
  other_header.set_header("user\tlabel\tcount");
  EXPECT_THAT(SchemaOfModel(Spec(), other_header),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("price")));
}

}  // namespace
}  // namespace embedps::worker
