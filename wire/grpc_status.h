// Conversion between absl::Status and grpc::Status, done once at the
// server's and the client's edge. abseil and gRPC share the code numbering.
#ifndef EMBEDPS_WIRE_GRPC_STATUS_H_
#define EMBEDPS_WIRE_GRPC_STATUS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace embedps::wire {

inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

// As FromGrpcStatus, the message prefixed with `where` and ": " (a peer's
// address, a method): for errors gathered from several peers.
inline absl::Status FromGrpcStatus(const grpc::Status& status,
                                   absl::string_view where) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(where, ": ", status.error_message()));
}

}  // namespace embedps::wire

#endif  // EMBEDPS_WIRE_GRPC_STATUS_H_
