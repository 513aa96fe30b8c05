#include "server/table_config.h"

#include <cstdint>

#include "common/process_memory.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/table_registry.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

proto::TableConfig Parse(const std::string& text) {
  proto::TableConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config));
  return config;
}

TEST(TableConfigTest, UnsetFieldsTakeTheSpecDefaults) {
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec spec,
                       SpecFromConfig(Parse("name: 'users' dim: 8")));
  const embedding::TableSpec defaults;
  EXPECT_EQ(spec.name, "users");
  EXPECT_EQ(spec.dim, 8);
  EXPECT_EQ(spec.optimizer.kind, defaults.optimizer.kind);
  EXPECT_EQ(spec.optimizer.learning_rate, defaults.optimizer.learning_rate);
  EXPECT_EQ(spec.initializer.high, defaults.initializer.high);
  EXPECT_EQ(spec.num_stripes, defaults.num_stripes);
}

TEST(TableConfigTest, RoundTripsEveryField) {
  const proto::TableConfig config = Parse(R"pb(
    name: "items"
    dim: 32
    seed: 9
    memory_budget_bytes: 1000000
    num_stripes: 16
    expected_rows: 123456
    initializer { kind: NORMAL mean: 0.5 stddev: 0.2 truncated: true }
    optimizer {
      kind: FTRL
      ftrl_alpha: 0.1
      ftrl_beta: 2
      ftrl_l1: 0.01
      ftrl_l2: 0.02
    }
    admission { kind: COUNT min_count: 3 sketch_counters: 65536 }
    eviction { ttl: 100 ttl_unit: SECONDS }
  )pb");
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec spec, SpecFromConfig(config));
  EXPECT_EQ(spec.optimizer.ftrl_l2, 0.02f);
  EXPECT_EQ(spec.admission.min_count, 3u);
  EXPECT_EQ(spec.eviction.ttl_unit, embedding::EvictionSpec::TtlUnit::kSeconds);
  EXPECT_EQ(spec.expected_rows, 123456u);
  EXPECT_EQ(ConfigFromSpec(spec).expected_rows(), 123456u);
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec again,
                       SpecFromConfig(ConfigFromSpec(spec)));
  EXPECT_EQ(ConfigFromSpec(spec).SerializeAsString(),
            ConfigFromSpec(again).SerializeAsString());
}

TEST(TableConfigTest, BadConfigsNameTheField) {
  EXPECT_THAT(SpecFromConfig(Parse("name: 'x' dim: 0")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'dim'")));
  proto::TableConfig config = Parse("name: 'x' dim: 4");
  config.mutable_optimizer()->set_kind(
      static_cast<proto::OptimizerConfig::Kind>(99));
  EXPECT_THAT(SpecFromConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer.kind")));
  config = Parse("name: 'x' dim: 4");
  config.mutable_serving()->set_storage(
      static_cast<proto::ServingConfig::Storage>(7));
  EXPECT_THAT(SpecFromConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("serving.storage")));
  config = Parse("name: 'x' dim: 4");
  config.mutable_serving()->set_unknown_keys(
      static_cast<proto::ServingConfig::UnknownKeys>(-3));
  EXPECT_THAT(SpecFromConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("serving.unknown_keys")));
}

// A serving replica's registry keeps the served config and holds the
// stored rows: a float16 table of dim 5 stores 3 floats a row.
TEST(TableRegistryTest, ServingRowsAreStoredAsTheConfigSays) {
  TableRegistry::Options options;
  options.serving_rows = true;
  TableRegistry registry(options);
  proto::TableConfig config = Parse(
      "name: 'x' dim: 5 serving { storage: FLOAT16 } "
      "optimizer { kind: ADAGRAD }");
  ASSERT_OK_AND_ASSIGN(const auto created,
                       registry.Create(ValuesOnlyConfig(config)));
  ASSERT_OK_AND_ASSIGN(const auto entry, registry.Find(created.table_id));
  EXPECT_EQ(entry.config->dim(), 5);
  EXPECT_EQ(entry.table->spec().dim, 3);
  EXPECT_EQ(entry.config->optimizer().kind(), proto::OptimizerConfig::SGD);
  // The replica's override replaces the table's storage.
  config.set_name("y");
  ASSERT_OK_AND_ASSIGN(
      const auto overridden,
      registry.Create(ValuesOnlyConfig(config, proto::ServingConfig::INT8)));
  ASSERT_OK_AND_ASSIGN(const auto y, registry.Find(overridden.table_id));
  EXPECT_EQ(y.config->serving().storage(), proto::ServingConfig::INT8);
  EXPECT_EQ(y.table->spec().dim, 1 + 2);
}

TEST(TableRegistryTest, EachShardCommitsItsShareOfTheExpectedRows) {
  EXPECT_EQ(TableRegistry::ShardShare(10, 4), 3u);
  EXPECT_EQ(TableRegistry::ShardShare(12, 4), 3u);
  EXPECT_EQ(TableRegistry::ShardShare(0, 4), 0u);
  EXPECT_EQ(TableRegistry::ShardShare(~uint64_t{0}, 1), ~uint64_t{0});
  const proto::TableConfig config =
      Parse("name: 'wide' dim: 64 expected_rows: 400000");
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec whole, SpecFromConfig(config));
  embedding::TableSpec quarter = whole;
  quarter.expected_rows = 100000;
  TableRegistry::Options options;
  options.num_shards = 4;
  TableRegistry registry(options);
  const uint64_t before = ResidentBytes();
  ASSERT_OK(registry.Create(config));
  const uint64_t grown = ResidentBytes() - before;
  EXPECT_GE(grown, embedding::ExpectedRowsBytes(quarter) * 9 / 10);
  EXPECT_LT(grown, embedding::ExpectedRowsBytes(whole) / 2);
  // The table keeps the config it was asked for: the whole table's rows.
  EXPECT_EQ(registry.List()[0].config->expected_rows(), 400000u);
  // Another hint is the same spec.
  ASSERT_OK_AND_ASSIGN(
      auto again,
      registry.Create(Parse("name: 'wide' dim: 64 expected_rows: 7")));
  EXPECT_FALSE(again.created);
}

// Every path that creates tables (CreateTable, a checkpoint's restore, a
// primary's catch-up) goes through the registry: it holds the limit.
TEST(TableRegistryTest, ExpectedRowsPastTheLimitAreRefusedAndNothingIsMade) {
  TableRegistry::Options options;
  options.num_shards = 2;
  options.max_expected_rows_bytes = uint64_t{4} << 20;
  TableRegistry registry(options);
  const uint64_t before = ResidentBytes();
  // 1M rows of dim 64 (SGD: ~272 bytes a row), half of them here: ~136 MB.
  EXPECT_THAT(
      registry.Create(Parse("name: 'big' dim: 64 optimizer { kind: SGD } "
                            "expected_rows: 1000000")),
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr("--max_expected_rows_mb")));
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_LT(ResidentBytes() - before, uint64_t{8} << 20);
  // 20k rows, 10k here: ~2.7 MB.
  const proto::TableConfig small =
      Parse("name: 'big' dim: 64 optimizer { kind: SGD } expected_rows: 20000");
  ASSERT_OK_AND_ASSIGN(embedding::TableSpec spec, SpecFromConfig(small));
  EXPECT_LE(registry.ExpectedRowsBytesHere(spec), uint64_t{4} << 20);
  EXPECT_GT(registry.ExpectedRowsBytesHere(spec), uint64_t{2} << 20);
  ASSERT_OK(registry.Create(small));
  EXPECT_EQ(registry.size(), 1u);
}

TEST(TableRegistryTest, CreateIsIdempotentAndRefusesAnotherSpec) {
  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto first, registry.Create(Parse("name: 'a' dim: 4")));
  EXPECT_TRUE(first.created);
  ASSERT_OK_AND_ASSIGN(auto second, registry.Create(Parse("name: 'b' dim: 4")));
  EXPECT_NE(first.table_id, second.table_id);
  // Spelling out a default is the same spec.
  ASSERT_OK_AND_ASSIGN(
      auto again, registry.Create(Parse("name: 'a' dim: 4 num_stripes: 64")));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.table_id, first.table_id);
  EXPECT_THAT(registry.Create(Parse("name: 'a' dim: 8")),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("different spec (dim: existing {dim: 4}, "
                                 "requested {dim: 8})")));
  EXPECT_THAT(
      registry.Create(Parse("name: 'a' dim: 4 consistency { mode: SYNC }")),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("different spec")));
  EXPECT_THAT(
      registry.Create(Parse("name: 'c' dim: 4 consistency { staleness: 2 }")),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("staleness")));
  EXPECT_THAT(registry.Find(7), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_EQ(registry.List().size(), 2u);
  EXPECT_EQ(registry.List()[0].synchronizer, nullptr);
  ASSERT_OK_AND_ASSIGN(
      auto sync,
      registry.Create(Parse("name: 's' dim: 4 consistency { mode: SYNC }")));
  ASSERT_OK_AND_ASSIGN(auto entry, registry.Find(sync.table_id));
  EXPECT_NE(entry.synchronizer, nullptr);
  EXPECT_EQ(entry.config->consistency().timeout_ms(), 60000u);
}

}  // namespace
}  // namespace embedps::server
