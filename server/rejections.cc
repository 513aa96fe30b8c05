#include "server/rejections.h"

#include "wire/grpc_status.h"

namespace embedps::server {

const char* RejectionName(Rejection reason) {
  switch (reason) {
    case Rejection::kUnknownTable:
      return "unknown_table";
    case Rejection::kEmptyRequest:
      return "empty_request";
    case Rejection::kMalformedKeys:
      return "malformed_keys";
    case Rejection::kSizeMismatch:
      return "size_mismatch";
    case Rejection::kNonFinite:
      return "non_finite_gradient";
    case Rejection::kOverLimit:
      return "over_limit";
    case Rejection::kWrongShard:
      return "wrong_shard";
    case Rejection::kBadValueType:
      return "bad_value_type";
    case Rejection::kInvalidSpec:
      return "invalid_spec";
    case Rejection::kSpecConflict:
      return "spec_conflict";
    case Rejection::kLateStep:
      return "late_step";
    case Rejection::kMalformedRequest:
      return "malformed_request";
    case Rejection::kUnreadAnswers:
      return "unread_answers";
    case Rejection::kCount:
      break;
  }
  return "unknown";
}

grpc::Status Rejections::Reject(Rejection reason, const absl::Status& status) {
  counts_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
  return wire::ToGrpcStatus(status);
}

void Rejections::Fill(proto::StatsResponse* response) const {
  for (size_t r = 0; r < counts_.size(); ++r) {
    (*response->mutable_rejected_requests())[RejectionName(
        static_cast<Rejection>(r))] =
        counts_[r].load(std::memory_order_relaxed);
  }
}

}  // namespace embedps::server
