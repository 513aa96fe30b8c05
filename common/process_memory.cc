#include "common/process_memory.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace embedps {
namespace {

// A cgroup limit file's value; 0 for "max", values of 2^62 and above (v1's
// "no limit"), and anything unreadable.
uint64_t LimitIn(const std::string& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text)) return 0;
  uint64_t limit = 0;
  if (!absl::SimpleAtoi(text, &limit) || limit >= (uint64_t{1} << 62)) {
    return 0;
  }
  return limit;
}

// The least limit of `file` in the cgroup directory `base` + `group` and
// every directory above it up to `base`; 0 if none has one.
uint64_t LeastLimitUpFrom(const std::string& base, std::string group,
                          const std::string& file) {
  uint64_t least = 0;
  while (true) {
    const uint64_t limit = LimitIn(base + group + "/" + file);
    if (limit != 0) least = least == 0 ? limit : std::min(least, limit);
    if (group.empty() || group == "/") break;
    group.resize(group.rfind('/'));
  }
  return least;
}

}  // namespace

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0;
  uint64_t resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

uint64_t AvailableMemoryBytes(const std::string& root) {
  uint64_t available = 0;
  std::ifstream meminfo(root + "/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    absl::string_view view(line);
    if (!absl::ConsumePrefix(&view, "MemTotal:")) continue;
    view = absl::StripAsciiWhitespace(view);
    uint64_t kib = 0;
    if (absl::ConsumeSuffix(&view, " kB") &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(view), &kib)) {
      available = kib << 10;
    }
    break;
  }
  if (available == 0) return 0;
  // Lines "hierarchy-id:controllers:path": v2's is "0::/path", v1's
  // memory controller "N:memory:/path" (or with others, "memory,...").
  std::ifstream cgroups(root + "/proc/self/cgroup");
  for (std::string line; std::getline(cgroups, line);) {
    const std::vector<std::string> parts = absl::StrSplit(line, ':');
    if (parts.size() != 3) continue;
    uint64_t limit = 0;
    if (parts[0] == "0" && parts[1].empty()) {
      limit = LeastLimitUpFrom(root + "/sys/fs/cgroup", parts[2], "memory.max");
    } else {
      const std::vector<absl::string_view> controllers =
          absl::StrSplit(parts[1], ',');
      if (std::find(controllers.begin(), controllers.end(), "memory") ==
          controllers.end()) {
        continue;
      }
      limit = LeastLimitUpFrom(root + "/sys/fs/cgroup/memory", parts[2],
                               "memory.limit_in_bytes");
    }
    if (limit != 0) available = std::min(available, limit);
  }
  return available;
}

}  // namespace embedps
