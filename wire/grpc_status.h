// Conversion between absl::Status and grpc::Status, done once at the
// server's and the client's edge. abseil and gRPC share the code numbering.
#ifndef EMBEDPS_WIRE_GRPC_STATUS_H_
#define EMBEDPS_WIRE_GRPC_STATUS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace embedps::wire {

// The longest status message a server sends. Messages quote what a client
// sent (a path, a table name), which may be any size: a message past a
// few KB would break the reply's status (it travels as a header).
inline constexpr size_t kMaxStatusMessageBytes = 1024;

// `message`, its middle left out (and said so) if it is longer than
// kMaxStatusMessageBytes.
inline std::string BoundedMessage(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  constexpr size_t kHead = kMaxStatusMessageBytes * 2 / 3;
  constexpr size_t kTail = kMaxStatusMessageBytes / 4;
  return absl::StrCat(message.substr(0, kHead), " [... ",
                      message.size() - kHead - kTail, " bytes left out ...] ",
                      message.substr(message.size() - kTail));
}

// Every status a server answers goes through here: its message bounded.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      BoundedMessage(status.message()));
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
