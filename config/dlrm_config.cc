#include "config/dlrm_config.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data/criteo_reader.h"
#include "dense/model.h"

namespace embedps::config {

absl::StatusOr<Mode> ParseMode(const std::string& text) {
  Mode m;
  if (text.empty() || text == "sync") return m;
  if (text == "async") {
    m.mode = proto::ConsistencyConfig::ASYNC;
    return m;
  }
  uint32_t staleness = 0;
  if (text.rfind("ssp:", 0) == 0 &&
      absl::SimpleAtoi(text.substr(4), &staleness)) {
    m.mode = proto::ConsistencyConfig::SSP;
    m.staleness = staleness;
    return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "mode '", text, "' is not async, sync or ssp:N (N a staleness >= 0)"));
}

absl::StatusOr<dense::DenseOptimizerSpec> DenseOptimizerOf(
    const DenseOptimizerConfig& c, int64_t total_steps) {
  dense::DenseOptimizerSpec spec;
  if (c.kind().empty() || c.kind() == "adam") {
    spec.kind = dense::DenseOptimizerSpec::Kind::kAdam;
  } else if (c.kind() == "sgd") {
    spec.kind = dense::DenseOptimizerSpec::Kind::kSgd;
  } else if (c.kind() == "adamw") {
    spec.kind = dense::DenseOptimizerSpec::Kind::kAdamW;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense_optimizer.kind '", c.kind(), "' is not sgd, adam or adamw"));
  }
  if (c.learning_rate() != 0) spec.learning_rate = c.learning_rate();
  spec.momentum = c.momentum();
  spec.weight_decay = c.weight_decay();
  spec.warmup_steps = c.warmup_steps();
  spec.min_learning_rate = c.min_learning_rate();
  spec.total_steps = total_steps;
  if (c.decay().empty() || c.decay() == "constant") {
    spec.decay = dense::DenseOptimizerSpec::Decay::kConstant;
  } else if (c.decay() == "linear") {
    spec.decay = dense::DenseOptimizerSpec::Decay::kLinear;
  } else if (c.decay() == "cosine") {
    spec.decay = dense::DenseOptimizerSpec::Decay::kCosine;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("dense_optimizer.decay '", c.decay(),
                     "' is not constant, linear or cosine"));
  }
  return spec;
}

data::FeatureSchemaSpec FeatureSchemaSpecOf(const FeatureSchema& schema) {
  data::FeatureSchemaSpec spec;
  const bool csv = schema.format() == FeatureSchema::CSV;
  spec.column_separator = csv ? ',' : '\t';
  spec.list_separator = !schema.list_separator().empty()
                            ? schema.list_separator()[0]
                            : (csv ? '|' : ',');
  spec.weight_separator =
      !schema.weight_separator().empty() ? schema.weight_separator()[0] : ':';
  spec.header = schema.header();
  spec.label = schema.label();
  for (const DenseColumnConfig& d : schema.dense()) {
    data::DenseTransform transform = data::DenseTransform::kNone;
    if (d.transform() == DenseColumnConfig::LOG1P) {
      transform = data::DenseTransform::kLog1p;
    } else if (d.transform() == DenseColumnConfig::STANDARDIZE) {
      transform = data::DenseTransform::kStandardize;
    }
    spec.dense.push_back({d.column(), transform});
  }
  for (const SparseColumnConfig& s : schema.sparse()) {
    data::FeatureSchemaSpec::Sparse sparse;
    sparse.column = s.column();
    sparse.multi_valued = s.multi_valued();
    sparse.weighted = s.weighted();
    sparse.max_values = s.max_values() > 0 ? s.max_values() : 256;
    sparse.id_format = s.id_format() == SparseColumnConfig::HEX
                           ? data::IdFormat::kHex
                       : s.id_format() == SparseColumnConfig::DECIMAL
                           ? data::IdFormat::kDecimal
                           : data::IdFormat::kText;
    spec.sparse.push_back(sparse);
  }
  return spec;
}

std::vector<std::string> SlotTables(const WorkerConfig& c) {
  std::vector<std::string> tables;
  if (c.has_schema()) {
    for (const SparseColumnConfig& s : c.schema().sparse()) {
      tables.push_back(s.table());
    }
  } else {
    for (const SlotConfig& slot : c.slot()) tables.push_back(slot.table());
  }
  return tables;
}

dense::ModelSpec ModelSpecOf(const WorkerConfig& c) {
  dense::ModelSpec spec;
  spec.num_dense =
      c.has_schema() ? c.schema().dense_size() : data::kCriteoDense;
  spec.bottom.assign(c.bottom().begin(), c.bottom().end());
  spec.top.assign(c.top().begin(), c.top().end());
  spec.embedding_dim = c.embedding_dim();
  spec.interaction = c.interaction() == WorkerConfig::CROSS
                         ? dense::Interaction::kCross
                         : dense::Interaction::kDot;
  spec.cross_layers = c.cross_layers();
  spec.seed = c.seed();
  const auto pooling = [](SlotConfig::Pooling pooling, bool weighted) {
    // A weighted bag's rows arrive scaled by their weights: summed.
    return pooling == SlotConfig::MEAN && !weighted ? dense::Pooling::kMean
                                                    : dense::Pooling::kSum;
  };
  if (c.has_schema()) {
    for (const SparseColumnConfig& s : c.schema().sparse()) {
      spec.slots.push_back(pooling(s.pooling(), s.weighted()));
    }
  } else {
    for (const SlotConfig& slot : c.slot()) {
      spec.slots.push_back(pooling(slot.pooling(), false));
    }
  }
  return spec;
}

absl::Status ValidateWorkerConfig(const WorkerConfig& c) {
  if (c.has_schema()) {
    if (c.slot_size() != 0) {
      return absl::InvalidArgumentError(
          "config has both slot and schema: with a schema, its sparse "
          "columns are the slots (give each its table there)");
    }
    if (c.schema().dense_size() == 0) {
      return absl::InvalidArgumentError(
          "schema has no dense column: the model's bottom MLP needs at "
          "least one");
    }
    // The columns themselves are checked against the files' header when
    // the job opens them (data::PrepareFeatureSchema); what needs no file:
    absl::StatusOr<data::FeatureSchema> resolved =
        c.schema().header()
            ? absl::StatusOr<data::FeatureSchema>(data::FeatureSchema())
            : data::ResolveFeatureSchema(FeatureSchemaSpecOf(c.schema()));
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema: ", resolved.status().message()));
    }
    if (c.schema().statistics_lines() < 0) {
      return absl::InvalidArgumentError(
          "schema.statistics_lines must not be negative");
    }
  } else if (c.slot_size() != data::kCriteoSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config has ", c.slot_size(), " slots; the Criteo format has ",
        data::kCriteoSlots, " categorical columns (one slot each)"));
  }
  if (c.table_size() == 0) {
    return absl::InvalidArgumentError("config has no table");
  }
  absl::flat_hash_map<std::string, int> dims;
  for (const proto::TableConfig& t : c.table()) {
    if (!dims.emplace(t.name(), t.dim()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", t.name(), "' is defined twice"));
    }
    if (t.dim() != c.embedding_dim()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", t.name(), "' has dim ", t.dim(),
                       " but embedding_dim is ", c.embedding_dim()));
    }
  }
  const std::vector<std::string> slot_tables = SlotTables(c);
  for (size_t s = 0; s < slot_tables.size(); ++s) {
    if (!dims.contains(slot_tables[s])) {
      return absl::InvalidArgumentError(absl::StrCat(
          c.has_schema() ? "schema.sparse " : "slot ", s, " names table '",
          slot_tables[s], "', which the config does not define"));
    }
  }
  if (c.train_files_size() == 0) {
    return absl::InvalidArgumentError("config has no train_files");
  }
  if (c.batch_size() < 0 || c.epochs() < 0 || c.max_steps() < 0) {
    return absl::InvalidArgumentError(
        "batch_size, epochs and max_steps must not be negative");
  }
  if (c.checkpoint_every_steps() < 0) {
    return absl::InvalidArgumentError(
        "checkpoint_every_steps must not be negative");
  }
  if (c.hot_rows_per_table() < 0 || c.hot_rows_refresh_steps() < 0 ||
      c.hot_rows_warmup_steps() < 0) {
    return absl::InvalidArgumentError(
        "hot_rows_per_table, hot_rows_refresh_steps and hot_rows_warmup_steps "
        "must not be negative");
  }
  if (c.full_checkpoint_every() < 0 || c.keep_checkpoints() < 0) {
    return absl::InvalidArgumentError(
        "full_checkpoint_every and keep_checkpoints must not be negative");
  }
  if (absl::Status s = ParseMode(c.mode()).status(); !s.ok()) return s;
  if (absl::Status s = DenseOptimizerOf(c.dense_optimizer(), 0).status();
      !s.ok()) {
    return s;
  }
  return dense::ValidateModelSpec(ModelSpecOf(c));
}

}  // namespace embedps::config
