#include "server/memory_guard.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_memory.h"

namespace embedps::server {
namespace {

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
    resident_.store(ResidentBytes(), std::memory_order_relaxed);
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
