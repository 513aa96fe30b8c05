// Why a training shard refused a request, counted per reason and reported
// by Stats (StatsResponse.rejected_requests) and /metrics.
//
// Thread safety: thread-safe (atomic counters).
#ifndef EMBEDPS_SERVER_REJECTIONS_H_
#define EMBEDPS_SERVER_REJECTIONS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"
#include "proto/stats.pb.h"

namespace embedps::server {

enum class Rejection {
  kUnknownTable,
  kEmptyRequest,
  kMalformedKeys,
  kSizeMismatch,
  kNonFinite,
  kOverLimit,
  kWrongShard,
  kBadValueType,
  kInvalidSpec,
  kSpecConflict,
  kLateStep,
  kMalformedRequest,
  // A Pull from a peer that has not read the answers it was given
  // (TrainingServiceOptions::max_unread_bytes_per_peer).
  kUnreadAnswers,
  kCount,  // number of reasons
};
// "unknown_table", "size_mismatch", ...: the name Stats reports it by.
const char* RejectionName(Rejection reason);

class Rejections {
 public:
  // Counts `reason` and returns `status` as the gRPC answer.
  grpc::Status Reject(Rejection reason, const absl::Status& status);
  // Adds every reason's count to response->rejected_requests.
  void Fill(proto::StatsResponse* response) const;

 private:
  std::array<std::atomic<uint64_t>, static_cast<size_t>(Rejection::kCount)>
      counts_{};
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_REJECTIONS_H_
