#include "server/serving_storage.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "wire/float16.h"

namespace embedps::server {
namespace {

int32_t StoredFloats(proto::ServingConfig::Storage storage, int32_t dim) {
  switch (storage) {
    case proto::ServingConfig::FLOAT16:
      return (dim + 1) / 2;
    case proto::ServingConfig::INT8:
      return 1 + (dim + 3) / 4;
    default:
      return dim;
  }
}

}  // namespace

RowCodec::RowCodec(proto::ServingConfig::Storage storage, int32_t dim)
    : storage_(storage),
      dim_(dim),
      stored_floats_(StoredFloats(storage, dim)) {}

// The stored bytes are read and written as halves and int8s through the
// floats that hold them.
using AliasedHalf = uint16_t __attribute__((may_alias));
using AliasedInt8 = int8_t __attribute__((may_alias));

void RowCodec::Encode(const float* row, float* stored) const {
  const size_t dim = static_cast<size_t>(dim_);
  switch (storage_) {
    case proto::ServingConfig::FLOAT16: {
      // wire's conversions run in their own translation unit.
      wire::FloatsToHalves(absl::MakeConstSpan(row, dim),
                           reinterpret_cast<uint16_t*>(stored));
      if (dim % 2 != 0) reinterpret_cast<AliasedHalf*>(stored)[dim] = 0;
      return;
    }
    case proto::ServingConfig::INT8: {
      float max = 0.0f;
      bool finite = true;
      for (size_t i = 0; i < dim; ++i) {
        finite &= std::isfinite(row[i]);
        max = std::max(max, std::fabs(row[i]));
      }
      std::fill(stored, stored + stored_floats_, 0.0f);
      stored[0] = !finite ? std::nanf("") : max / 127.0f;
      if (max == 0.0f || !finite) return;
      auto* q = reinterpret_cast<AliasedInt8*>(stored + 1);
      const float inverse = 127.0f / max;
      for (size_t i = 0; i < dim; ++i) {
        const float level = std::nearbyint(row[i] * inverse);
        q[i] = static_cast<int8_t>(std::clamp(level, -127.0f, 127.0f));
      }
      return;
    }
    default:
      std::memcpy(stored, row, dim * sizeof(float));
      return;
  }
}

void RowCodec::Decode(const float* stored, float* row) const {
  const size_t dim = static_cast<size_t>(dim_);
  switch (storage_) {
    case proto::ServingConfig::FLOAT16:
      wire::HalvesToFloats(
          absl::MakeConstSpan(reinterpret_cast<const uint16_t*>(stored), dim),
          row);
      return;
    case proto::ServingConfig::INT8: {
      const float scale = stored[0];
      const auto* q = reinterpret_cast<const AliasedInt8*>(stored + 1);
      for (size_t i = 0; i < dim; ++i) row[i] = scale * q[i];
      return;
    }
    default:
      std::memcpy(row, stored, dim * sizeof(float));
      return;
  }
}

absl::StatusOr<proto::ServingConfig::Storage> ParseServingStorage(
    absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "float32") return proto::ServingConfig::FLOAT32;
  if (lower == "float16") return proto::ServingConfig::FLOAT16;
  if (lower == "int8") return proto::ServingConfig::INT8;
  return absl::InvalidArgumentError(
      absl::StrCat("serving storage '", name.substr(0, 64),
                   "' is none of float32, float16, int8"));
}

}  // namespace embedps::server
