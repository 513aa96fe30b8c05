// Test helper: what a running ps_server holds, as Stats with content
// digests (embedding::DigestTable of every table) reports it.
#ifndef EMBEDPS_TESTING_SHARD_DIGEST_H_
#define EMBEDPS_TESTING_SHARD_DIGEST_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/stats.pb.h"

namespace embedps::testing {

// Stats of the shard at `address` ("host:port") with every table's
// content digest. Exact only while no writer runs.
absl::StatusOr<proto::StatsResponse> StatsWithDigests(
    const std::string& address);

}  // namespace embedps::testing

#endif  // EMBEDPS_TESTING_SHARD_DIGEST_H_
