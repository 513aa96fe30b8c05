#include "worker/dlrm_job.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "config/dlrm_config.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace embedps::worker {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

// A configuration of deploy/local, which must be valid.
config::WorkerConfig LocalConfig(
    const std::string& path = "deploy/local/dlrm_small.txtpb") {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  config::WorkerConfig config;
  EXPECT_TRUE(
      google::protobuf::TextFormat::ParseFromString(text.str(), &config));
  return config;
}

// The local config in Criteo's own form: slots instead of a schema.
config::WorkerConfig CriteoSlotsConfig() {
  config::WorkerConfig config = LocalConfig();
  config.clear_schema();
  for (int s = 0; s < 26; ++s) config.add_slot()->set_table("criteo");
  return config;
}

TEST(ValidateWorkerConfigTest, TheLocalConfigIsValid) {
  EXPECT_OK(config::ValidateWorkerConfig(LocalConfig()));
  EXPECT_OK(config::ValidateWorkerConfig(CriteoSlotsConfig()));
  // Its schema is Criteo's layout: 13 dense columns, 26 slots.
  const dense::ModelSpec spec = config::ModelSpecOf(LocalConfig());
  EXPECT_EQ(spec.num_dense, 13);
  EXPECT_EQ(spec.slots.size(), 26u);
  EXPECT_EQ(config::SlotTables(LocalConfig()),
            config::SlotTables(CriteoSlotsConfig()));
}

// A schema's mistakes that need no data file are named at once; the
// model's dense width and poolings follow the schema's columns.
TEST(ValidateWorkerConfigTest, ASchemaConfig) {
  const std::string path = "deploy/local/schema_small.txtpb";
  ASSERT_OK(config::ValidateWorkerConfig(LocalConfig(path)));
  const dense::ModelSpec spec = config::ModelSpecOf(LocalConfig(path));
  EXPECT_EQ(spec.num_dense, 5);
  ASSERT_EQ(spec.slots.size(), 10u);
  EXPECT_EQ(spec.slots[6], dense::Pooling::kMean);  // a list
  EXPECT_EQ(spec.slots[9], dense::Pooling::kSum);   // the weighted list
  const auto refused = [](config::WorkerConfig c, const std::string& what) {
    EXPECT_THAT(config::ValidateWorkerConfig(c),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  config::WorkerConfig c = LocalConfig(path);
  c.add_slot()->set_table("ids");
  refused(c, "both slot and schema");
  c = LocalConfig(path);
  c.mutable_schema()->clear_dense();
  refused(c, "no dense column");
  c = LocalConfig(path);
  c.mutable_schema()->mutable_sparse(2)->set_table("nowhere");
  refused(c, "schema.sparse 2 names table 'nowhere'");
  c = LocalConfig(path);
  c.mutable_schema()->set_header(false);
  refused(c, "column 'label' is not a 0-based position");
  c = LocalConfig(path);
  c.mutable_schema()->set_header(false);
  c.mutable_schema()->set_label("0");
  for (int d = 0; d < c.schema().dense_size(); ++d) {
    c.mutable_schema()->mutable_dense(d)->set_column(absl::StrCat(1 + d));
  }
  for (int s = 0; s < c.schema().sparse_size(); ++s) {
    c.mutable_schema()->mutable_sparse(s)->set_column(absl::StrCat(6 + s));
  }
  EXPECT_OK(config::ValidateWorkerConfig(c));
  c.mutable_schema()->mutable_sparse(0)->set_weighted(true);
  refused(c, "set multi_valued too");
}

// DCN-v2: the cross interaction with its layers; either without the other
// is named.
TEST(ValidateWorkerConfigTest, ACrossNetworkConfig) {
  config::WorkerConfig c = LocalConfig();
  c.set_interaction(config::WorkerConfig::CROSS);
  c.set_cross_layers(3);
  ASSERT_OK(config::ValidateWorkerConfig(c));
  const dense::ModelSpec spec = config::ModelSpecOf(c);
  EXPECT_EQ(spec.interaction, dense::Interaction::kCross);
  EXPECT_EQ(spec.cross_layers, 3);
  EXPECT_EQ(config::ModelSpecOf(LocalConfig()).interaction,
            dense::Interaction::kDot);
  c.set_cross_layers(0);
  EXPECT_THAT(
      config::ValidateWorkerConfig(c),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cross_layers")));
  c = LocalConfig();
  c.set_cross_layers(2);
  EXPECT_THAT(config::ValidateWorkerConfig(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("for the cross interaction")));
}

TEST(ValidateWorkerConfigTest, EachMistakeIsNamed) {
  const auto refused = [](config::WorkerConfig c, const std::string& what) {
    EXPECT_THAT(config::ValidateWorkerConfig(c),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  config::WorkerConfig c = CriteoSlotsConfig();
  c.mutable_slot()->RemoveLast();
  refused(c, "25 slots");

  c = CriteoSlotsConfig();
  c.mutable_slot(3)->set_table("nowhere");
  refused(c, "slot 3 names table 'nowhere'");

  c = LocalConfig();
  *c.add_table() = c.table(0);
  refused(c, "defined twice");

  c = LocalConfig();
  c.mutable_table(0)->set_dim(8);
  refused(c, "has dim 8");

  c = LocalConfig();
  c.clear_table();
  refused(c, "no table");

  c = LocalConfig();
  c.clear_train_files();
  refused(c, "no train_files");

  c = LocalConfig();
  c.set_batch_size(-1);
  refused(c, "must not be negative");

  c = LocalConfig();
  c.set_mode("ssp:x");
  refused(c, "ssp:N");

  c = LocalConfig();
  c.mutable_dense_optimizer()->set_kind("lamb");
  refused(c, "'lamb'");

  c = LocalConfig();
  c.mutable_dense_optimizer()->set_decay("step");
  refused(c, "'step'");

  c = LocalConfig();
  c.set_checkpoint_every_steps(-5);
  refused(c, "checkpoint_every_steps must not be negative");

  c = LocalConfig();
  c.set_hot_rows_warmup_steps(-1);
  refused(c, "hot_rows_warmup_steps must not be negative");

  c = LocalConfig();
  c.set_embedding_dim(8);
  for (auto& table : *c.mutable_table()) table.set_dim(8);
  refused(c, "embedding_dim");  // != the bottom MLP's output width
}

}  // namespace
}  // namespace embedps::worker
