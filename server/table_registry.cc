#include "server/table_registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/table_config.h"

namespace embedps::server {

absl::StatusOr<TableRegistry::CreateResult> TableRegistry::Create(
    const embedding::TableSpec& spec) {
  MutexLock lock(&mu_);
  if (auto it = id_by_name_.find(spec.name); it != id_by_name_.end()) {
    const embedding::TableSpec& existing = tables_[it->second]->spec();
    if (!SameSpec(existing, spec)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table '", spec.name,
          "' already exists with a different spec (existing: ",
          ConfigFromSpec(existing).ShortDebugString(),
          "; requested: ", ConfigFromSpec(spec).ShortDebugString(), ")"));
    }
    return CreateResult{it->second, false};
  }
  ASSIGN_OR_RETURN(std::unique_ptr<embedding::Table> table,
                   embedding::Table::Create(spec));
  const uint32_t id = static_cast<uint32_t>(tables_.size());
  tables_.push_back(std::move(table));
  id_by_name_.emplace(spec.name, id);
  return CreateResult{id, true};
}

absl::StatusOr<embedding::Table*> TableRegistry::Find(uint32_t table_id) const {
  ReaderMutexLock lock(&mu_);
  if (table_id >= tables_.size()) {
    return absl::NotFoundError(
        absl::StrCat("no table with id ", table_id, " on this server (ids 0..",
                     static_cast<int64_t>(tables_.size()) - 1,
                     " exist; resolve ids with CreateTable or ListTables)"));
  }
  return tables_[table_id].get();
}

std::vector<TableRegistry::Entry> TableRegistry::List() const {
  ReaderMutexLock lock(&mu_);
  std::vector<Entry> entries;
  for (uint32_t id = 0; id < tables_.size(); ++id) {
    entries.push_back({id, tables_[id].get()});
  }
  return entries;
}

}  // namespace embedps::server
