#include "embedding/table_spec.h"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "embedding/table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::embedding {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TableSpec ValidSpec() {
  TableSpec spec;
  spec.name = "user_id";
  spec.dim = 16;
  return spec;
}

TEST(TableSpecTest, DefaultsWithNameAndDimAreValid) {
  EXPECT_OK(ValidateTableSpec(ValidSpec()));
}

struct BadCase {
  std::string field;  // expected in the message
  std::function<void(TableSpec&)> mutate;
};

TEST(TableSpecTest, EachBadFieldIsNamed) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<BadCase> cases = {
      {"'name'", [](TableSpec& s) { s.name = ""; }},
      {"'name'", [](TableSpec& s) { s.name = "has space"; }},
      {"'name'", [](TableSpec& s) { s.name = std::string(129, 'a'); }},
      {"'dim'", [](TableSpec& s) { s.dim = 0; }},
      {"'dim'", [](TableSpec& s) { s.dim = -3; }},
      {"'dim'", [](TableSpec& s) { s.dim = 4097; }},
      {"'num_stripes'", [](TableSpec& s) { s.num_stripes = 0; }},
      {"'num_stripes'", [](TableSpec& s) { s.num_stripes = 48; }},
      {"'initializer.low/high'",
       [](TableSpec& s) {
         s.initializer.low = 1;
         s.initializer.high = 1;
       }},
      {"'initializer.low/high'",
       [=](TableSpec& s) { s.initializer.high = nan; }},
      {"'initializer.stddev'",
       [](TableSpec& s) {
         s.initializer.kind = InitializerSpec::Kind::kNormal;
         s.initializer.stddev = 0;
       }},
      {"'initializer.mean'",
       [=](TableSpec& s) {
         s.initializer.kind = InitializerSpec::Kind::kNormal;
         s.initializer.mean = inf;
       }},
      {"'initializer.value'",
       [=](TableSpec& s) {
         s.initializer.kind = InitializerSpec::Kind::kConstant;
         s.initializer.value = nan;
       }},
      {"'optimizer.learning_rate'",
       [](TableSpec& s) { s.optimizer.learning_rate = 0; }},
      {"'optimizer.learning_rate'",
       [=](TableSpec& s) { s.optimizer.learning_rate = nan; }},
      {"'optimizer.epsilon'", [](TableSpec& s) { s.optimizer.epsilon = -1; }},
      {"'optimizer.initial_accumulator'",
       [](TableSpec& s) { s.optimizer.initial_accumulator = -0.1f; }},
      {"'optimizer.beta1'",
       [](TableSpec& s) {
         s.optimizer.kind = OptimizerSpec::Kind::kAdam;
         s.optimizer.beta1 = 1.0f;
       }},
      {"'optimizer.beta2'",
       [](TableSpec& s) {
         s.optimizer.kind = OptimizerSpec::Kind::kAdam;
         s.optimizer.beta2 = -0.5f;
       }},
      {"'optimizer.ftrl_alpha'",
       [](TableSpec& s) {
         s.optimizer.kind = OptimizerSpec::Kind::kFtrl;
         s.optimizer.ftrl_alpha = 0;
       }},
      {"'optimizer.ftrl_l1'",
       [](TableSpec& s) {
         s.optimizer.kind = OptimizerSpec::Kind::kFtrl;
         s.optimizer.ftrl_l1 = -1;
       }},
      {"'optimizer.ftrl_beta'",
       [](TableSpec& s) {
         s.optimizer.kind = OptimizerSpec::Kind::kFtrl;
         s.optimizer.ftrl_beta = 0;
         s.optimizer.ftrl_l2 = 0;
       }},
      {"'admission.min_count'",
       [](TableSpec& s) {
         s.admission.kind = AdmissionSpec::Kind::kCount;
         s.admission.min_count = 0;
       }},
      {"'admission.min_count'",
       [](TableSpec& s) {
         s.admission.kind = AdmissionSpec::Kind::kCount;
         s.admission.min_count = 256;
       }},
      {"'admission.sketch_counters'",
       [](TableSpec& s) {
         s.admission.kind = AdmissionSpec::Kind::kCount;
         s.admission.sketch_counters = 10;
       }},
      {"'admission.probability'",
       [](TableSpec& s) {
         s.admission.kind = AdmissionSpec::Kind::kProbability;
         s.admission.probability = 0;
       }},
      {"'admission.probability'",
       [](TableSpec& s) {
         s.admission.kind = AdmissionSpec::Kind::kProbability;
         s.admission.probability = 1.5;
       }},
      {"'eviction.ttl'",
       [](TableSpec& s) { s.eviction.ttl = uint64_t{1} << 40; }},
  };
  for (const BadCase& c : cases) {
    TableSpec spec = ValidSpec();
    c.mutate(spec);
    EXPECT_THAT(
        ValidateTableSpec(spec),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)))
        << "case " << c.field;
    // The table factory refuses the same spec with the same message.
    EXPECT_THAT(
        Table::Create(spec),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.field)));
  }
}

TEST(TableSpecTest, StateFloatsPerOptimizer) {
  OptimizerSpec opt;
  opt.kind = OptimizerSpec::Kind::kSgd;
  EXPECT_EQ(OptimizerStateFloats(opt, 8), 0);
  opt.kind = OptimizerSpec::Kind::kAdagrad;
  EXPECT_EQ(OptimizerStateFloats(opt, 8), 8);
  opt.kind = OptimizerSpec::Kind::kRowWiseAdagrad;
  EXPECT_EQ(OptimizerStateFloats(opt, 8), 1);
  opt.kind = OptimizerSpec::Kind::kAdam;
  EXPECT_EQ(OptimizerStateFloats(opt, 8), 17);
  opt.kind = OptimizerSpec::Kind::kFtrl;
  EXPECT_EQ(OptimizerStateFloats(opt, 8), 16);
}

}  // namespace
}  // namespace embedps::embedding
