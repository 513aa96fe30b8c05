#include "server/key_checks.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "common/status_macros.h"

namespace embedps::server {

absl::Status CheckKeyCount(size_t n, const TrainingServiceOptions& options,
                           bool allow_empty, Rejection* rejection) {
  if (n == 0 && !allow_empty) {
    *rejection = Rejection::kEmptyRequest;
    return absl::InvalidArgumentError("empty request: no keys");
  }
  if (n > options.max_keys_per_request) {
    *rejection = Rejection::kOverLimit;
    return absl::ResourceExhaustedError(
        absl::StrCat(n, " keys in one request; this server takes at most ",
                     options.max_keys_per_request,
                     " (--max_keys_per_request): split the batch"));
  }
  return absl::OkStatus();
}

absl::Status CheckKeyShards(absl::Span<const uint64_t> keys,
                            const TrainingServiceOptions& options,
                            Rejection* rejection) {
  if (options.num_shards <= 1) return absl::OkStatus();
  for (uint64_t key : keys) {
    const int32_t shard = ShardOfKey(key, options.num_shards);
    if (shard != options.shard_index) {
      *rejection = Rejection::kWrongShard;
      return absl::FailedPreconditionError(absl::StrCat(
          "key ", key, " belongs to shard ", shard, " of ", options.num_shards,
          ", but this is shard ", options.shard_index,
          ": the client's shard list or count is wrong"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> ParseShardKeys(
    const std::string& bytes, const TrainingServiceOptions& options,
    Rejection* rejection) {
  if (bytes.size() % sizeof(uint64_t) != 0) {
    *rejection = Rejection::kMalformedKeys;
    return absl::InvalidArgumentError(absl::StrCat(
        "keys must be packed little-endian uint64, 8 bytes each; got ",
        bytes.size(), " bytes"));
  }
  RETURN_IF_ERROR(CheckKeyCount(bytes.size() / sizeof(uint64_t), options,
                                /*allow_empty=*/false, rejection));
  std::vector<uint64_t> keys(bytes.size() / sizeof(uint64_t));
  std::memcpy(keys.data(), bytes.data(), bytes.size());
  RETURN_IF_ERROR(CheckKeyShards(keys, options, rejection));
  return keys;
}

}  // namespace embedps::server
