#include "server/table_registry.h"

#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/format.h"
#include "common/status_macros.h"
#include "embedding/values_table.h"
#include "google/protobuf/descriptor.h"
#include "server/serving_storage.h"
#include "server/table_config.h"

namespace embedps::server {
namespace {

constexpr uint32_t kDefaultStepTimeoutMs = 60000;

absl::Status ValidateConsistency(const proto::ConsistencyConfig& c) {
  if (!proto::ConsistencyConfig::Mode_IsValid(c.mode())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table config field 'consistency.mode' has unknown value ", c.mode()));
  }
  if (c.mode() != proto::ConsistencyConfig::SSP && c.staleness() != 0) {
    return absl::InvalidArgumentError(
        "table config field 'consistency.staleness' is only meaningful with "
        "mode SSP");
  }
  return absl::OkStatus();
}

}  // namespace

TableRegistry::Entry TableRegistry::EntryOf(uint32_t id,
                                            const std::shared_ptr<Slot>& slot) {
  return Entry{id, slot->table.get(), slot->synchronizer.get(), &slot->config,
               slot};
}

uint64_t TableRegistry::LocalExpectedRows(uint64_t expected_rows) const {
  return options_.num_shards == 0
             ? 0
             : ShardShare(expected_rows, options_.num_shards);
}

uint64_t TableRegistry::ExpectedRowsBytesHere(
    const embedding::TableSpec& spec) const {
  embedding::TableSpec local = spec;
  local.expected_rows = LocalExpectedRows(spec.expected_rows);
  return embedding::ExpectedRowsBytes(local);
}

TableRegistry::Slot::~Slot() {
  synchronizer.reset();
  table.reset();
  if (!spill_directory.empty()) {
    std::error_code ignored;  // a leftover directory is emptied at start
    std::filesystem::remove_all(spill_directory, ignored);
  }
}

absl::Status TableRegistry::SameSpec(const proto::TableConfig& existing,
                                     const proto::TableConfig& requested) {
  // expected_rows is a hint about memory, not part of the spec.
  proto::TableConfig existing_spec = existing, requested_spec = requested;
  existing_spec.clear_expected_rows();
  requested_spec.clear_expected_rows();
  if (existing_spec.SerializeAsString() == requested_spec.SerializeAsString()) {
    return absl::OkStatus();
  }
  // Name the fields that differ, each value shortened: a whole spec
  // printed twice buries the difference.
  const auto shortened = [](std::string text) {
    if (text.size() > 120) text = text.substr(0, 117) + "...";
    return text.empty() ? std::string("unset") : text;
  };
  std::vector<std::string> differences;
  const google::protobuf::Descriptor* descriptor =
      existing_spec.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    proto::TableConfig a, b;
    a.GetReflection()->SwapFields(&existing_spec, &a, {field});
    b.GetReflection()->SwapFields(&requested_spec, &b, {field});
    if (a.SerializeAsString() == b.SerializeAsString()) continue;
    differences.push_back(absl::StrCat(
        field->name(), ": existing {", shortened(a.ShortDebugString()),
        "}, requested {", shortened(b.ShortDebugString()), "}"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "table '", existing.name(), "' already exists with a different spec (",
      absl::StrJoin(differences, "; "),
      "): use the existing spec, or another name"));
}

absl::StatusOr<std::pair<proto::TableConfig, embedding::TableSpec>>
TableRegistry::Canonical(const proto::TableConfig& config) const {
  ASSIGN_OR_RETURN(embedding::TableSpec spec, SpecFromConfig(config));
  RETURN_IF_ERROR(ValidateConsistency(config.consistency()));
  proto::TableConfig canonical = ConfigFromSpec(spec);
  *canonical.mutable_consistency() = config.consistency();
  *canonical.mutable_serving() = config.serving();
  if (canonical.consistency().timeout_ms() == 0) {
    canonical.mutable_consistency()->set_timeout_ms(kDefaultStepTimeoutMs);
  }
  if (options_.serving_rows) {
    // The config keeps the served dim; the table holds the stored rows.
    spec.dim = RowCodec(config.serving().storage(), spec.dim).stored_floats();
  }
  return std::make_pair(std::move(canonical), spec);
}

absl::StatusOr<std::shared_ptr<TableRegistry::Slot>> TableRegistry::Build(
    proto::TableConfig canonical, const embedding::TableSpec& spec) {
  RETURN_IF_ERROR(embedding::ValidateTableSpec(spec));
  embedding::TableSpec local = spec;
  local.expected_rows = LocalExpectedRows(spec.expected_rows);
  if (const uint64_t bytes = embedding::ExpectedRowsBytes(local);
      bytes > options_.max_expected_rows_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "table '", spec.name, "': expected_rows ", spec.expected_rows,
        " would commit ", bytes >> 20,
        " MiB here at once, more than this "
        "server commits for one table: ",
        options_.max_expected_rows_bytes >> 20,
        " MiB (--max_expected_rows_mb); ask for fewer rows (more still fit: "
        "it is a hint)"));
  }
  auto slot = std::make_shared<Slot>();
  embedding::TableOptions options;
  if (!options_.spill_root.empty()) {
    // A directory of its own: a table built while another of the same
    // name still lives (a restore built aside, a drop's calls in flight)
    // must not empty that one's.
    slot->spill_directory =
        absl::StrCat(options_.spill_root, "/",
                     checkpoint::TableFileStem(spec.name), ".", built_++);
    options.spill_directory = slot->spill_directory;
    options.spill_block_cache_bytes = options_.spill_block_cache_bytes;
    options.spill_read_around = options_.spill_read_around;
  }
  const bool spills =
      !options.spill_directory.empty() && local.memory_budget_bytes > 0;
  if (options_.serving_rows && !spills &&
      embedding::OptimizerStateFloats(local.optimizer, local.dim) == 0) {
    // A replica's rows in memory: values and keys, nothing else.
    ASSIGN_OR_RETURN(slot->table, embedding::CreateValuesTable(local));
  } else {
    ASSIGN_OR_RETURN(slot->table,
                     embedding::Table::Create(local, std::move(options)));
  }
  const proto::ConsistencyConfig& consistency = canonical.consistency();
  if (consistency.mode() != proto::ConsistencyConfig::ASYNC) {
    slot->synchronizer = std::make_unique<StepSynchronizer>(
        consistency.mode() == proto::ConsistencyConfig::SYNC
            ? StepSynchronizer::Mode::kSync
            : StepSynchronizer::Mode::kSsp,
        consistency.staleness(), options_.num_workers,
        absl::Milliseconds(consistency.timeout_ms()), slot->table.get(),
        options_.sync_apply_threads);
  }
  slot->config = std::move(canonical);
  return slot;
}

absl::StatusOr<TableRegistry::CreateResult> TableRegistry::Create(
    const proto::TableConfig& config, size_t max_tables, uint32_t at_id) {
  ASSIGN_OR_RETURN(auto canonical, Canonical(config));
  const embedding::TableSpec& spec = canonical.second;

  // One Create at a time; the table is built with only this held, so that
  // Find (every Pull's and Push's lookup) never waits for a table that
  // commits its expected rows' memory or opens its spill tier.
  MutexLock creating(&create_mu_);
  {
    ReaderMutexLock lock(&mu_);
    if (auto it = id_by_name_.find(spec.name); it != id_by_name_.end()) {
      RETURN_IF_ERROR(SameSpec(slots_[it->second]->config, canonical.first));
      if (at_id != kNextId && at_id != it->second) {
        return absl::FailedPreconditionError(
            absl::StrCat("table '", spec.name, "' has id ", it->second,
                         " here, not ", at_id));
      }
      return CreateResult{it->second, false};
    }
    if (at_id != kNextId && at_id < slots_.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table '", spec.name, "' cannot take id ", at_id, ": ids up to ",
          slots_.size() - 1, " are given out here"));
    }
    if (id_by_name_.size() >= max_tables) {
      return absl::ResourceExhaustedError(
          absl::StrCat("table '", spec.name,
                       "' not created: this server holds ", id_by_name_.size(),
                       " tables, its limit (--max_tables); drop one "
                       "(DropTable) or raise the limit"));
    }
  }
  ASSIGN_OR_RETURN(std::shared_ptr<Slot> slot,
                   Build(std::move(canonical.first), spec));
  // Nothing else added a table meanwhile (create_mu_); Drop only removes.
  MutexLock lock(&mu_);
  if (at_id != kNextId) slots_.resize(at_id);  // dropped ids stay empty
  const uint32_t id = static_cast<uint32_t>(slots_.size());
  slots_.push_back(std::move(slot));
  id_by_name_.emplace(spec.name, id);
  return CreateResult{id, true};
}

absl::StatusOr<std::unique_ptr<TableRegistry::PreparedTable>>
TableRegistry::Prepare(const proto::TableConfig& config) {
  ASSIGN_OR_RETURN(auto canonical, Canonical(config));
  ASSIGN_OR_RETURN(std::shared_ptr<Slot> slot,
                   Build(std::move(canonical.first), canonical.second));
  return std::unique_ptr<PreparedTable>(new PreparedTable(std::move(slot)));
}

absl::Status TableRegistry::Install(
    std::vector<std::unique_ptr<PreparedTable>> tables) {
  MutexLock creating(&create_mu_);
  std::vector<std::shared_ptr<Slot>> replaced;  // freed after the lock
  MutexLock lock(&mu_);
  // Everything is checked before anything changes.
  absl::flat_hash_map<std::string, uint32_t> installing;
  for (const std::unique_ptr<PreparedTable>& prepared : tables) {
    const std::string& name = prepared->config().name();
    if (!installing.emplace(name, 0).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("table '", name, "' is named twice"));
    }
    auto it = id_by_name_.find(name);
    if (it == id_by_name_.end()) continue;
    const Slot& existing = *slots_[it->second];
    RETURN_IF_ERROR(SameSpec(existing.config, prepared->config()));
    if (existing.table->Stats().rows > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("table '", name,
                       "' already has rows here: a checkpoint is "
                       "restored into tables without rows (drop it first)"));
    }
  }
  for (std::unique_ptr<PreparedTable>& prepared : tables) {
    const std::string& name = prepared->config().name();
    if (auto it = id_by_name_.find(name); it != id_by_name_.end()) {
      replaced.push_back(std::move(slots_[it->second]));
      slots_[it->second] = std::move(prepared->slot_);
    } else {
      const uint32_t id = static_cast<uint32_t>(slots_.size());
      slots_.push_back(std::move(prepared->slot_));
      id_by_name_.emplace(name, id);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TableRegistry::Entry> TableRegistry::Find(
    uint32_t table_id) const {
  ReaderMutexLock lock(&mu_);
  if (table_id >= slots_.size()) {
    return absl::NotFoundError(
        absl::StrCat("no table with id ", table_id, " on this server (ids 0..",
                     static_cast<int64_t>(slots_.size()) - 1,
                     " exist; resolve ids with CreateTable or ListTables)"));
  }
  if (slots_[table_id] == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("table id ", table_id, " was dropped"));
  }
  return EntryOf(table_id, slots_[table_id]);
}

absl::StatusOr<TableRegistry::Entry> TableRegistry::FindByName(
    const std::string& name) const {
  ReaderMutexLock lock(&mu_);
  auto it = id_by_name_.find(name);
  if (it == id_by_name_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no table named '", name, "' on this server"));
  }
  return EntryOf(it->second, slots_[it->second]);
}

absl::StatusOr<uint32_t> TableRegistry::Drop(const std::string& name) {
  std::shared_ptr<Slot> dropped;
  uint32_t id = 0;
  {
    MutexLock lock(&mu_);
    auto it = id_by_name_.find(name);
    if (it == id_by_name_.end()) {
      return absl::NotFoundError(
          absl::StrCat("no table named '", name, "' on this server"));
    }
    id = it->second;
    dropped = std::move(slots_[id]);
    id_by_name_.erase(it);
  }
  // Freed here, outside the lock, unless a call in flight still holds it.
  dropped.reset();
  return id;
}

size_t TableRegistry::size() const {
  ReaderMutexLock lock(&mu_);
  return id_by_name_.size();
}

std::vector<TableRegistry::Entry> TableRegistry::List() const {
  ReaderMutexLock lock(&mu_);
  std::vector<Entry> entries;
  for (uint32_t id = 0; id < slots_.size(); ++id) {
    if (slots_[id] != nullptr) entries.push_back(EntryOf(id, slots_[id]));
  }
  return entries;
}

}  // namespace embedps::server
