#include "common/logging.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace embedps {
namespace {

constexpr char kPattern[] = "%Y-%m-%d %H:%M:%S.%e %L %n] %v";

// Serializes creation: spdlog's registry throws on a duplicate name.
Mutex& LoggerCreationMutex() {
  static Mutex* const mu = new Mutex;  // never destroyed: loggers outlive main
  return *mu;
}

}  // namespace

std::shared_ptr<spdlog::logger> Logger(absl::string_view component) {
  const std::string name(component);
  MutexLock lock(&LoggerCreationMutex());
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = spdlog::stderr_logger_mt(name);
  logger->set_pattern(kPattern);
  logger->set_level(spdlog::get_level());
  return logger;
}

absl::Status SetLogLevel(absl::string_view level) {
  const spdlog::level::level_enum parsed =
      spdlog::level::from_str(std::string(level));
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", level,
                     "'; use one of trace, debug, info, warn, error, off"));
  }
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace embedps
