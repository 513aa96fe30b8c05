// The checks every key-addressed training call makes of its keys before it
// touches a table: whole uint64s, some but not too many, each of this
// shard. On failure `*rejection` says why (the reason Stats counts).
#ifndef EMBEDPS_SERVER_KEY_CHECKS_H_
#define EMBEDPS_SERVER_KEY_CHECKS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/rejections.h"
#include "server/training_service.h"

namespace embedps::server {

// There are some keys (unless `allow_empty`) but not too many.
absl::Status CheckKeyCount(size_t n, const TrainingServiceOptions& options,
                           bool allow_empty, Rejection* rejection);

// Every key belongs to this shard.
absl::Status CheckKeyShards(absl::Span<const uint64_t> keys,
                            const TrainingServiceOptions& options,
                            Rejection* rejection);

// The keys of a request's `bytes` (uint64 little-endian, 8 bytes each),
// after all three checks (no key is no request).
absl::StatusOr<std::vector<uint64_t>> ParseShardKeys(
    const std::string& bytes, const TrainingServiceOptions& options,
    Rejection* rejection);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_KEY_CHECKS_H_
