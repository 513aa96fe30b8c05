#include "server/push_deduplicator.h"

namespace embedps::server {

PushDeduplicator::Decision PushDeduplicator::Begin(uint64_t client_id,
                                                   uint64_t sequence) {
  if (sequence == 0) return {Decision::kApply, absl::OkStatus()};
  MutexLock lock(&mu_);
  ClientLog& log = clients_[client_id];
  auto [it, inserted] = log.attempts.try_emplace(sequence, nullptr);
  if (inserted) {
    it->second = std::make_shared<Attempt>();
    return {Decision::kApply, absl::OkStatus()};
  }
  ++duplicates_;
  std::shared_ptr<Attempt> attempt = it->second;
  finished_cv_.Wait(&mu_, [&] { return attempt->done; });
  return {Decision::kDone, attempt->status};
}

void PushDeduplicator::Finish(uint64_t client_id, uint64_t sequence,
                              const absl::Status& status) {
  if (sequence == 0) return;
  {
    MutexLock lock(&mu_);
    ClientLog& log = clients_[client_id];
    auto it = log.attempts.find(sequence);
    if (it != log.attempts.end()) {
      it->second->done = true;
      it->second->status = status;
    }
    log.finished.push_back(sequence);
    while (log.finished.size() > window_) {
      log.attempts.erase(log.finished.front());
      log.finished.pop_front();
    }
  }
  finished_cv_.SignalAll();
}

uint64_t PushDeduplicator::duplicates() const {
  MutexLock lock(&mu_);
  return duplicates_;
}

}  // namespace embedps::server
