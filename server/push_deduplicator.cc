#include "server/push_deduplicator.h"

namespace embedps::server {

PushDeduplicator::Decision PushDeduplicator::Begin(uint64_t client_id,
                                                   uint64_t sequence) {
  if (sequence == 0) return {Decision::kApply, absl::OkStatus()};
  MutexLock lock(&mu_);
  ClientLog& log = clients_[client_id];
  bool waited = false;
  while (true) {
    auto [it, inserted] = log.attempts.try_emplace(sequence);
    if (inserted) return {Decision::kApply, absl::OkStatus()};
    if (!waited) ++duplicates_;
    if (it->second.done) return {Decision::kDone, it->second.status};
    // In flight: wait for its outcome, or for it to be abandoned.
    waited = true;
    finished_cv_.Wait(&mu_);
  }
}

void PushDeduplicator::Remember(ClientLog& log, uint64_t sequence) const {
  if (log.finished.size() < window_) {
    log.finished.push_back(sequence);
    return;
  }
  log.attempts.erase(log.finished[log.oldest]);
  log.finished[log.oldest] = sequence;
  log.oldest = (log.oldest + 1) % log.finished.size();
}

void PushDeduplicator::Finish(uint64_t client_id, uint64_t sequence,
                              const absl::Status& status) {
  if (sequence == 0) return;
  {
    MutexLock lock(&mu_);
    ClientLog& log = clients_[client_id];
    auto it = log.attempts.find(sequence);
    if (it != log.attempts.end()) {
      it->second.done = true;
      it->second.status = status;
    }
    Remember(log, sequence);
  }
  finished_cv_.SignalAll();
}

void PushDeduplicator::Abandon(uint64_t client_id, uint64_t sequence) {
  if (sequence == 0) return;
  {
    MutexLock lock(&mu_);
    ClientLog& log = clients_[client_id];
    log.attempts.erase(sequence);
  }
  finished_cv_.SignalAll();
}

void PushDeduplicator::MarkApplied(uint64_t client_id, uint64_t sequence) {
  if (sequence == 0) return;
  MutexLock lock(&mu_);
  ClientLog& log = clients_[client_id];
  if (auto it = log.attempts.find(sequence); it != log.attempts.end()) {
    it->second.applied = true;
  }
}

absl::flat_hash_map<uint64_t, std::vector<uint64_t>>
PushDeduplicator::ExportApplied() const {
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> applied;
  MutexLock lock(&mu_);
  for (const auto& [client, log] : clients_) {
    std::vector<uint64_t>& out = applied[client];
    for (const auto& [sequence, attempt] : log.attempts) {
      if (attempt.applied || (attempt.done && attempt.status.ok())) {
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
    auto [it, inserted] = log.attempts.try_emplace(sequence);
    if (!inserted) continue;
    it->second.applied = true;
    it->second.done = true;
    Remember(log, sequence);
  }
}

uint64_t PushDeduplicator::duplicates() const {
  MutexLock lock(&mu_);
  return duplicates_;
}

}  // namespace embedps::server
