#include "common/program_usage.h"

#include <utility>

#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace embedps {

void SetProgramUsage(absl::string_view usage,
                     std::vector<std::string> flag_files) {
  absl::SetProgramUsageMessage(usage);
  const auto ours = [files = std::move(flag_files)](absl::string_view file) {
    for (const std::string& f : files) {
      if (absl::EndsWith(file, f)) return true;
    }
    return false;
  };
  absl::FlagsUsageConfig config;
  config.contains_help_flags = ours;
  config.contains_helpshort_flags = ours;
  absl::SetFlagsUsageConfig(config);
}

}  // namespace embedps
