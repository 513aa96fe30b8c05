#include "server/table_config.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace embedps::server {
namespace {

using embedding::AdmissionSpec;
using embedding::EvictionSpec;
using embedding::InitializerSpec;
using embedding::OptimizerSpec;
using embedding::TableSpec;

absl::Status UnknownEnum(absl::string_view field, int value) {
  return absl::InvalidArgumentError(absl::StrCat(
      "table config field '", field, "' has unknown value ", value));
}

}  // namespace

absl::StatusOr<TableSpec> SpecFromConfig(const proto::TableConfig& config) {
  TableSpec spec;
  spec.name = config.name();
  spec.dim = config.dim();
  spec.seed = config.seed();
  spec.memory_budget_bytes = config.memory_budget_bytes();
  if (config.num_stripes() != 0) spec.num_stripes = config.num_stripes();
  spec.expected_rows = config.expected_rows();
  // The serving options are not part of the engine's spec; still checked.
  if (!proto::ServingConfig::UnknownKeys_IsValid(
          config.serving().unknown_keys())) {
    return UnknownEnum("serving.unknown_keys", config.serving().unknown_keys());
  }
  if (!proto::ServingConfig::Storage_IsValid(config.serving().storage())) {
    return UnknownEnum("serving.storage", config.serving().storage());
  }

  const proto::InitializerConfig& init = config.initializer();
  switch (init.kind()) {
    case proto::InitializerConfig::UNIFORM:
      spec.initializer.kind = InitializerSpec::Kind::kUniform;
      break;
    case proto::InitializerConfig::ZEROS:
      spec.initializer.kind = InitializerSpec::Kind::kZeros;
      break;
    case proto::InitializerConfig::CONSTANT:
      spec.initializer.kind = InitializerSpec::Kind::kConstant;
      break;
    case proto::InitializerConfig::NORMAL:
      spec.initializer.kind = InitializerSpec::Kind::kNormal;
      break;
    default:
      return UnknownEnum("initializer.kind", init.kind());
  }
  if (init.has_value()) spec.initializer.value = init.value();
  if (init.has_low()) spec.initializer.low = init.low();
  if (init.has_high()) spec.initializer.high = init.high();
  if (init.has_mean()) spec.initializer.mean = init.mean();
  if (init.has_stddev()) spec.initializer.stddev = init.stddev();
  spec.initializer.truncated = init.truncated();

  const proto::OptimizerConfig& opt = config.optimizer();
  switch (opt.kind()) {
    case proto::OptimizerConfig::ADAGRAD:
      spec.optimizer.kind = OptimizerSpec::Kind::kAdagrad;
      break;
    case proto::OptimizerConfig::SGD:
      spec.optimizer.kind = OptimizerSpec::Kind::kSgd;
      break;
    case proto::OptimizerConfig::ROWWISE_ADAGRAD:
      spec.optimizer.kind = OptimizerSpec::Kind::kRowWiseAdagrad;
      break;
    case proto::OptimizerConfig::ADAM:
      spec.optimizer.kind = OptimizerSpec::Kind::kAdam;
      break;
    case proto::OptimizerConfig::FTRL:
      spec.optimizer.kind = OptimizerSpec::Kind::kFtrl;
      break;
    default:
      return UnknownEnum("optimizer.kind", opt.kind());
  }
  if (opt.has_learning_rate())
    spec.optimizer.learning_rate = opt.learning_rate();
  if (opt.has_initial_accumulator()) {
    spec.optimizer.initial_accumulator = opt.initial_accumulator();
  }
  if (opt.has_epsilon()) spec.optimizer.epsilon = opt.epsilon();
  if (opt.has_beta1()) spec.optimizer.beta1 = opt.beta1();
  if (opt.has_beta2()) spec.optimizer.beta2 = opt.beta2();
  if (opt.has_ftrl_alpha()) spec.optimizer.ftrl_alpha = opt.ftrl_alpha();
  if (opt.has_ftrl_beta()) spec.optimizer.ftrl_beta = opt.ftrl_beta();
  if (opt.has_ftrl_l1()) spec.optimizer.ftrl_l1 = opt.ftrl_l1();
  if (opt.has_ftrl_l2()) spec.optimizer.ftrl_l2 = opt.ftrl_l2();

  const proto::AdmissionConfig& adm = config.admission();
  switch (adm.kind()) {
    case proto::AdmissionConfig::ALWAYS:
      spec.admission.kind = AdmissionSpec::Kind::kAlways;
      break;
    case proto::AdmissionConfig::COUNT:
      spec.admission.kind = AdmissionSpec::Kind::kCount;
      break;
    case proto::AdmissionConfig::PROBABILITY:
      spec.admission.kind = AdmissionSpec::Kind::kProbability;
      break;
    default:
      return UnknownEnum("admission.kind", adm.kind());
  }
  if (adm.has_min_count()) spec.admission.min_count = adm.min_count();
  if (adm.has_sketch_counters())
    spec.admission.sketch_counters = adm.sketch_counters();
  if (adm.has_probability()) spec.admission.probability = adm.probability();

  spec.eviction.ttl = config.eviction().ttl();
  spec.eviction.max_rows = config.eviction().max_rows();
  switch (config.eviction().ttl_unit()) {
    case proto::EvictionConfig::STEPS:
      spec.eviction.ttl_unit = EvictionSpec::TtlUnit::kSteps;
      break;
    case proto::EvictionConfig::SECONDS:
      spec.eviction.ttl_unit = EvictionSpec::TtlUnit::kSeconds;
      break;
    default:
      return UnknownEnum("eviction.ttl_unit", config.eviction().ttl_unit());
  }
  RETURN_IF_ERROR(embedding::ValidateTableSpec(spec));
  return spec;
}

proto::TableConfig ConfigFromSpec(const TableSpec& spec) {
  proto::TableConfig config;
  config.set_name(spec.name);
  config.set_dim(spec.dim);
  config.set_seed(spec.seed);
  config.set_memory_budget_bytes(spec.memory_budget_bytes);
  config.set_num_stripes(spec.num_stripes);
  config.set_expected_rows(spec.expected_rows);

  proto::InitializerConfig* init = config.mutable_initializer();
  switch (spec.initializer.kind) {
    case InitializerSpec::Kind::kUniform:
      init->set_kind(proto::InitializerConfig::UNIFORM);
      break;
    case InitializerSpec::Kind::kZeros:
      init->set_kind(proto::InitializerConfig::ZEROS);
      break;
    case InitializerSpec::Kind::kConstant:
      init->set_kind(proto::InitializerConfig::CONSTANT);
      break;
    case InitializerSpec::Kind::kNormal:
      init->set_kind(proto::InitializerConfig::NORMAL);
      break;
  }
  init->set_value(spec.initializer.value);
  init->set_low(spec.initializer.low);
  init->set_high(spec.initializer.high);
  init->set_mean(spec.initializer.mean);
  init->set_stddev(spec.initializer.stddev);
  init->set_truncated(spec.initializer.truncated);

  proto::OptimizerConfig* opt = config.mutable_optimizer();
  switch (spec.optimizer.kind) {
    case OptimizerSpec::Kind::kAdagrad:
      opt->set_kind(proto::OptimizerConfig::ADAGRAD);
      break;
    case OptimizerSpec::Kind::kSgd:
      opt->set_kind(proto::OptimizerConfig::SGD);
      break;
    case OptimizerSpec::Kind::kRowWiseAdagrad:
      opt->set_kind(proto::OptimizerConfig::ROWWISE_ADAGRAD);
      break;
    case OptimizerSpec::Kind::kAdam:
      opt->set_kind(proto::OptimizerConfig::ADAM);
      break;
    case OptimizerSpec::Kind::kFtrl:
      opt->set_kind(proto::OptimizerConfig::FTRL);
      break;
  }
  opt->set_learning_rate(spec.optimizer.learning_rate);
  opt->set_initial_accumulator(spec.optimizer.initial_accumulator);
  opt->set_epsilon(spec.optimizer.epsilon);
  opt->set_beta1(spec.optimizer.beta1);
  opt->set_beta2(spec.optimizer.beta2);
  opt->set_ftrl_alpha(spec.optimizer.ftrl_alpha);
  opt->set_ftrl_beta(spec.optimizer.ftrl_beta);
  opt->set_ftrl_l1(spec.optimizer.ftrl_l1);
  opt->set_ftrl_l2(spec.optimizer.ftrl_l2);

  proto::AdmissionConfig* adm = config.mutable_admission();
  switch (spec.admission.kind) {
    case AdmissionSpec::Kind::kAlways:
      adm->set_kind(proto::AdmissionConfig::ALWAYS);
      break;
    case AdmissionSpec::Kind::kCount:
      adm->set_kind(proto::AdmissionConfig::COUNT);
      break;
    case AdmissionSpec::Kind::kProbability:
      adm->set_kind(proto::AdmissionConfig::PROBABILITY);
      break;
  }
  adm->set_min_count(spec.admission.min_count);
  adm->set_sketch_counters(spec.admission.sketch_counters);
  adm->set_probability(spec.admission.probability);

  config.mutable_eviction()->set_ttl(spec.eviction.ttl);
  config.mutable_eviction()->set_max_rows(spec.eviction.max_rows);
  config.mutable_eviction()->set_ttl_unit(spec.eviction.ttl_unit ==
                                                  EvictionSpec::TtlUnit::kSteps
                                              ? proto::EvictionConfig::STEPS
                                              : proto::EvictionConfig::SECONDS);
  return config;
}

proto::TableConfig ValuesOnlyConfig(
    proto::TableConfig config,
    std::optional<proto::ServingConfig::Storage> storage) {
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  if (storage.has_value()) config.mutable_serving()->set_storage(*storage);
  return config;
}

}  // namespace embedps::server
