#include "embedding/table_digest.h"

#include <cstring>

#include "common/key_hash.h"
#include "common/status_macros.h"

namespace embedps::embedding {
namespace {

uint64_t HashFloats(uint64_t h, absl::Span<const float> floats) {
  for (float f : floats) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    h = MixPair(h, bits);
  }
  return h;
}

}  // namespace

absl::StatusOr<TableDigest> DigestTable(const Table& table) {
  TableDigest result;
  RETURN_IF_ERROR(table.Scan([&](const RowView& row) {
    uint64_t h = Mix64(row.key);
    h = HashFloats(h, row.embedding);
    h = HashFloats(h, row.optimizer_state);
    result.digest += h;
    ++result.rows;
  }));
  return result;
}

}  // namespace embedps::embedding
