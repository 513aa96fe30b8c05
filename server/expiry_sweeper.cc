#include "server/expiry_sweeper.h"

#include "common/logging.h"

namespace embedps::server {

ExpirySweeper::ExpirySweeper(TableRegistry* registry, absl::Duration interval)
    : registry_(registry), interval_(interval) {
  if (interval_ > absl::ZeroDuration())
    thread_ = std::thread([this] { Loop(); });
}

ExpirySweeper::~ExpirySweeper() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    stop_cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

absl::StatusOr<uint64_t> ExpirySweeper::SweepOnce() {
  uint64_t removed = 0;
  absl::Status first_error;
  for (const TableRegistry::Entry& entry : registry_->List()) {
    const embedding::EvictionSpec& eviction = entry.table->spec().eviction;
    if (eviction.ttl == 0 && eviction.max_rows == 0) continue;
    absl::StatusOr<uint64_t> swept = entry.table->SweepExpired();
    if (swept.ok()) {
      removed += *swept;
    } else {
      first_error.Update(swept.status());
    }
  }
  MutexLock lock(&mu_);
  ++sweeps_;
  if (!first_error.ok()) return first_error;
  return removed;
}

uint64_t ExpirySweeper::sweeps() {
  MutexLock lock(&mu_);
  return sweeps_;
}

void ExpirySweeper::Loop() {
  const auto log = Logger("eviction");
  while (true) {
    {
      MutexLock lock(&mu_);
      const absl::Time until = absl::Now() + interval_;
      stop_cv_.WaitUntil(&mu_, until, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_;
      });
      if (stopping_) return;
    }
    absl::StatusOr<uint64_t> removed = SweepOnce();
    if (!removed.ok()) {
      log->warn("TTL sweep: {}", removed.status().ToString());
    } else if (*removed > 0) {
      log->debug("TTL sweep removed {} rows", *removed);
    }
  }
}

}  // namespace embedps::server
