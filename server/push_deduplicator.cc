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

void PushDeduplicator::Abandon(uint64_t client_id, uint64_t sequence,
                               const absl::Status& status) {
  if (sequence == 0) return;
  {
    MutexLock lock(&mu_);
    ClientLog& log = clients_[client_id];
    auto it = log.attempts.find(sequence);
    if (it == log.attempts.end()) return;
    it->second->done = true;
    it->second->status = status;
    log.attempts.erase(it);
  }
  finished_cv_.SignalAll();
}

void PushDeduplicator::MarkApplied(uint64_t client_id, uint64_t sequence) {
  if (sequence == 0) return;
  MutexLock lock(&mu_);
  ClientLog& log = clients_[client_id];
  if (auto it = log.attempts.find(sequence); it != log.attempts.end()) {
    it->second->applied = true;
  }
}

absl::flat_hash_map<uint64_t, std::vector<uint64_t>>
PushDeduplicator::ExportApplied() const {
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> applied;
  MutexLock lock(&mu_);
  for (const auto& [client, log] : clients_) {
    std::vector<uint64_t>& out = applied[client];
    for (const auto& [sequence, attempt] : log.attempts) {
      if (attempt->applied || (attempt->done && attempt->status.ok())) {
        out.push_back(sequence);
      }
    }
  }
  return applied;
}

void PushDeduplicator::ImportApplied(uint64_t client_id,
                                     absl::Span<const uint64_t> sequences) {
  MutexLock lock(&mu_);
  ClientLog& log = clients_[client_id];
  for (uint64_t sequence : sequences) {
    if (sequence == 0) continue;
    auto [it, inserted] = log.attempts.try_emplace(sequence, nullptr);
    if (!inserted) continue;
    it->second = std::make_shared<Attempt>();
    it->second->applied = true;
    it->second->done = true;
    log.finished.push_back(sequence);
  }
  while (log.finished.size() > window_) {
    log.attempts.erase(log.finished.front());
    log.finished.pop_front();
  }
}

uint64_t PushDeduplicator::duplicates() const {
  MutexLock lock(&mu_);
  return duplicates_;
}

}  // namespace embedps::server
