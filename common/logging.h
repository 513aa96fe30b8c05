// Process-wide leveled logging for every embedps component (spdlog).
//
// Each component asks for its own named logger once and keeps it:
//
//   static const auto log = embedps::Logger("embedding");
//   log->info("swept {} expired rows in {} ms", n, ms);
//
// Lines go to stderr as `2026-11-22 15:46:32.123 I embedding] message`.
// Thread safety: all functions and the returned loggers are thread-safe.
#ifndef EMBEDPS_COMMON_LOGGING_H_
#define EMBEDPS_COMMON_LOGGING_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

// Lets log lines format absl::string_view (Debian's abseil has its own).
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename FormatContext>
  auto format(absl::string_view s, FormatContext& ctx) const {
    return fmt::formatter<fmt::string_view>::format(
        fmt::string_view(s.data(), s.size()), ctx);
  }
};

namespace embedps {

// Returns the logger named `component`, creating it on first use. Never null.
std::shared_ptr<spdlog::logger> Logger(absl::string_view component);

// Sets the level of every logger, present and future: one of trace, debug,
// info, warn, error, off. INVALID_ARGUMENT names the accepted values.
absl::Status SetLogLevel(absl::string_view level);

}  // namespace embedps

#endif  // EMBEDPS_COMMON_LOGGING_H_
