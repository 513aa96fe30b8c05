// How a serving replica stores a table's rows (ServingConfig.storage): as
// trained (float32), as IEEE half floats, or as int8 with a scale a row.
//
// A stored row lives in the floats of an embedding::Table row: the
// replica's table has stored_floats() floats a row instead of dim(), and
// its bytes are, little-endian:
//   FLOAT32  dim floats;
//   FLOAT16  dim halves (wire/float16.h), padded with zeros to a float;
//   INT8     the scale (a float), then dim int8 values, padded to a float:
//            value i reads as scale · q[i], with scale = max|row| / 127.
// Encode then Decode gives the nearest representable row (half: rounded
// to nearest even; int8: q = round(x / scale)); float32 is exact.
// Thread safety: immutable after construction.
#ifndef EMBEDPS_SERVER_SERVING_STORAGE_H_
#define EMBEDPS_SERVER_SERVING_STORAGE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/tables.pb.h"

namespace embedps::server {

class RowCodec {
 public:
  // REQUIRES: dim > 0, `storage` a known value.
  RowCodec(proto::ServingConfig::Storage storage, int32_t dim);

  proto::ServingConfig::Storage storage() const { return storage_; }
  // Floats a row is served with.
  int32_t dim() const { return dim_; }
  // Floats a row is stored in.
  int32_t stored_floats() const { return stored_floats_; }
  // True for FLOAT32: stored rows are the rows.
  bool identity() const { return storage_ == proto::ServingConfig::FLOAT32; }

  // Writes the stored form of `row` (dim() floats) into `stored`
  // (stored_floats() floats). A non-finite value in an INT8 row makes the
  // whole row read back as NaN (training never holds one).
  void Encode(const float* row, float* stored) const;
  // Writes the row (dim() floats) that `stored` holds.
  void Decode(const float* stored, float* row) const;

 private:
  proto::ServingConfig::Storage storage_;
  int32_t dim_;
  int32_t stored_floats_;
};

// "float32", "float16" or "int8" (case-insensitive): a storage; anything
// else is INVALID_ARGUMENT naming the choices.
absl::StatusOr<proto::ServingConfig::Storage> ParseServingStorage(
    absl::string_view name);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_SERVING_STORAGE_H_
