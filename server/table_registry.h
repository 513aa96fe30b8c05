// The tables one ps_server holds, by name and by numeric id.
//
// Tables are never removed while the server runs, so a Table* returned by
// Find stays valid for the registry's lifetime.
// Thread safety: all methods are thread-safe.
#ifndef EMBEDPS_SERVER_TABLE_REGISTRY_H_
#define EMBEDPS_SERVER_TABLE_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "embedding/table.h"
#include "embedding/table_spec.h"

namespace embedps::server {

class TableRegistry {
 public:
  struct CreateResult {
    uint32_t table_id;
    // False when a table of the same name and spec already existed.
    bool created;
  };

  // Creates the table, or returns the existing one if a table of that name
  // has the same spec (idempotent). FAILED_PRECONDITION if the name exists
  // with a different spec; INVALID_ARGUMENT for an invalid spec.
  absl::StatusOr<CreateResult> Create(const embedding::TableSpec& spec);

  // The table with `table_id`, or NOT_FOUND naming the known ids.
  absl::StatusOr<embedding::Table*> Find(uint32_t table_id) const;

  struct Entry {
    uint32_t table_id;
    embedding::Table* table;
  };
  // Every table, in id order.
  std::vector<Entry> List() const;

 private:
  mutable Mutex mu_;
  // Index = table id.
  std::vector<std::unique_ptr<embedding::Table>> tables_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> id_by_name_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_TABLE_REGISTRY_H_
