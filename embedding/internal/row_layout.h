// The bytes of one row in a stripe's arena, and the flags its header
// carries. Header-only: every part of the table reads rows through these.
//
//   row    = [ key u64 | last_touch u32 | access_word u32 ][ embedding ][ state
//   ] record =            [ last_touch u32 | access count u32 ][ embedding ][
//   state ]
//
// A row's bytes from kRecordOffset on are its record (RowRecordBytes): the
// form it has in the spill tier and in checkpoint files, where the access
// word carries the count only (no flags).
#ifndef EMBEDPS_EMBEDDING_INTERNAL_ROW_LAYOUT_H_
#define EMBEDPS_EMBEDDING_INTERNAL_ROW_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "embedding/internal/row_index_hash.h"

namespace embedps::embedding_internal {

using RowId = uint32_t;

// A row's last_touch holds this while the row is on the free list.
constexpr uint32_t kFreeRowMark = UINT32_MAX;
// Largest touch value a live row records.
constexpr uint32_t kMaxTouch = UINT32_MAX - 1;
// Row ids are uint32; this one means "no row".
constexpr RowId kNoRow = UINT32_MAX;
// Row ids fit in 24 bits: an index slot packs the id with an 8-bit key
// fingerprint into 4 bytes. 16.7M rows a stripe, 1.07 billion a table with
// the default 64 stripes (more stripes raise it).
constexpr uint64_t kMaxRowsPerStripe = uint64_t{1} << 24;

// The first 16 bytes of every row.
struct RowHeader {
  uint64_t key;
  uint32_t last_touch;
  // Pulls (saturating at kCountMask), kDirtyBit and kReferencedBit.
  uint32_t access_word;
};
static_assert(sizeof(RowHeader) == 16, "header must stay 16 bytes");

constexpr uint32_t kCountMask = (uint32_t{1} << 30) - 1;
// Changed since the table's last snapshot (only resident rows carry it;
// spilled changed rows are listed in SpillState::dirty_keys).
constexpr uint32_t kDirtyBit = uint32_t{1} << 30;
// Touched since the CLOCK hand last passed the row.
constexpr uint32_t kReferencedBit = uint32_t{1} << 31;
// Where a row's record starts.
constexpr size_t kRecordOffset = 8;
constexpr int32_t kHeaderFloats = sizeof(RowHeader) / sizeof(float);

// The hash a table computes once per key (row_index_hash.h).
inline uint64_t KeyHash(uint64_t key) { return TableKeyHash(key); }

// Records outside memory carry the access count only: clears the flags of
// the record's access word, in place.
inline void ClearRecordFlags(char* record) {
  uint32_t word;
  std::memcpy(&word, record + 4, sizeof(word));
  word &= kCountMask;
  std::memcpy(record + 4, &word, sizeof(word));
}

// Appends a record to `out` with its flags cleared.
inline void AppendCleanRecord(const char* record, size_t record_bytes,
                              std::vector<char>& out) {
  const size_t at = out.size();
  out.insert(out.end(), record, record + record_bytes);
  ClearRecordFlags(out.data() + at);
}

// A row's access metadata as the first 8 bytes of its record hold it (last
// touch, then the access count without flags), read as one integer.
inline uint64_t AccessMetadata(const RowHeader& header) {
  const uint32_t words[2] = {header.last_touch,
                             header.access_word & kCountMask};
  uint64_t metadata;
  std::memcpy(&metadata, words, sizeof(metadata));
  return metadata;
}

inline void PrefetchRead(const void* p) { __builtin_prefetch(p, 0, 3); }
inline void PrefetchWrite(const void* p) { __builtin_prefetch(p, 1, 3); }

}  // namespace embedps::embedding_internal

#endif  // EMBEDPS_EMBEDDING_INTERNAL_ROW_LAYOUT_H_
