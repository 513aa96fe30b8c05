#include "worker/dlrm_job.h"

#include <fstream>
#include <sstream>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace embedps::worker {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

// The local job's configuration, which must be valid.
config::WorkerConfig LocalConfig() {
  std::ifstream in("deploy/local/dlrm_small.txtpb");
  std::stringstream text;
  text << in.rdbuf();
  config::WorkerConfig config;
  EXPECT_TRUE(
      google::protobuf::TextFormat::ParseFromString(text.str(), &config));
  return config;
}

TEST(ValidateWorkerConfigTest, TheLocalConfigIsValid) {
  EXPECT_OK(config::ValidateWorkerConfig(LocalConfig()));
}

TEST(ValidateWorkerConfigTest, EachMistakeIsNamed) {
  const auto refused = [](config::WorkerConfig c, const std::string& what) {
    EXPECT_THAT(config::ValidateWorkerConfig(c),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(what)));
  };
  config::WorkerConfig c = LocalConfig();
  c.mutable_slot()->RemoveLast();
  refused(c, "25 slots");

  c = LocalConfig();
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
  c.set_embedding_dim(8);
  for (auto& table : *c.mutable_table()) table.set_dim(8);
  refused(c, "embedding_dim");  // != the bottom MLP's output width
}

}  // namespace
}  // namespace embedps::worker
