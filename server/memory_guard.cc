#include "server/memory_guard.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace embedps::server {
namespace {

uint64_t ReadResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0;
  uint64_t resident_pages = 0;
  if (!(statm >> size_pages >> resident_pages)) return 0;
  return resident_pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

constexpr uint64_t kMiB = uint64_t{1} << 20;

}  // namespace

MemoryGuard::MemoryGuard(uint64_t limit_bytes, absl::Duration refresh)
    : limit_bytes_(limit_bytes),
      refresh_ns_(absl::ToInt64Nanoseconds(refresh)) {}

uint64_t MemoryGuard::resident_bytes() {
  const int64_t now = absl::GetCurrentTimeNanos();
  if (now - read_at_ns_.load(std::memory_order_acquire) >= refresh_ns_ &&
      !reading_.exchange(true, std::memory_order_acquire)) {
    // One caller reads; the others use the last figure meanwhile.
    resident_.store(ReadResidentBytes(), std::memory_order_relaxed);
    read_at_ns_.store(now, std::memory_order_release);
    reading_.store(false, std::memory_order_release);
  }
  return resident_.load(std::memory_order_relaxed);
}

absl::Status MemoryGuard::Admit(uint64_t bytes,
                                absl::FunctionRef<std::string()> what) {
  if (limit_bytes_ == 0) return absl::OkStatus();
  const uint64_t resident = resident_bytes();
  if (resident + bytes <= limit_bytes_) return absl::OkStatus();
  refused_.fetch_add(1, std::memory_order_relaxed);
  return absl::ResourceExhaustedError(absl::StrCat(
      what(), " refused: it may take ", (bytes + kMiB - 1) / kMiB,
      " MiB and this server holds ", resident / kMiB, " MiB of its ",
      limit_bytes_ / kMiB,
      " MiB limit (--memory_limit_mb); nothing was changed. Add shards, "
      "give tables a memory_budget_bytes (spill), or send smaller batches"));
}

}  // namespace embedps::server
