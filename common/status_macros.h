// Early-return helpers for absl::Status and absl::StatusOr<T>.
//
// The abseil in Debian 12 (20220623) ships neither absl/status/
// status_macros.h nor absl/log, so embedps keeps these two here.
//
//   RETURN_IF_ERROR(DoThing());              // returns the Status if !ok()
//   ASSIGN_OR_RETURN(auto row, FindRow(key)); // declares/assigns, or returns
//
// Both evaluate their argument exactly once. They work in functions that
// return absl::Status or any absl::StatusOr<U>.
#ifndef EMBEDPS_COMMON_STATUS_MACROS_H_
#define EMBEDPS_COMMON_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RETURN_IF_ERROR(expr)                                   \
  do {                                                          \
    const ::absl::Status embedps_status_macro_status_ = (expr); \
    if (!embedps_status_macro_status_.ok()) {                   \
      return embedps_status_macro_status_;                      \
    }                                                           \
  } while (false)

#define EMBEDPS_STATUS_MACROS_CONCAT_INNER(x, y) x##y
#define EMBEDPS_STATUS_MACROS_CONCAT(x, y) \
  EMBEDPS_STATUS_MACROS_CONCAT_INNER(x, y)

#define ASSIGN_OR_RETURN(lhs, rexpr) \
  EMBEDPS_ASSIGN_OR_RETURN_IMPL(     \
      EMBEDPS_STATUS_MACROS_CONCAT(embedps_statusor_, __LINE__), lhs, rexpr)

#define EMBEDPS_ASSIGN_OR_RETURN_IMPL(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) {                                     \
    return std::move(statusor).status();                    \
  }                                                         \
  lhs = std::move(statusor).value()

#endif  // EMBEDPS_COMMON_STATUS_MACROS_H_
