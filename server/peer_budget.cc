#include "server/peer_budget.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/peer_host.h"

namespace embedps::server {

PeerBudget::Hold& PeerBudget::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    peer_ = std::move(other.peer_);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void PeerBudget::Hold::Release() {
  if (budget_ == nullptr) return;
  budget_->Release(peer_, bytes_);
  budget_ = nullptr;
}

absl::StatusOr<PeerBudget::Hold> PeerBudget::Acquire(absl::string_view peer,
                                                     uint64_t bytes) {
  std::string host = wire::PeerHost(peer);
  MutexLock lock(&mu_);
  uint64_t& held = held_[host];
  if (bytes_per_peer_ != 0 && held != 0 && held + bytes > bytes_per_peer_) {
    const uint64_t now = held;
    return absl::UnavailableError(absl::StrCat(
        "this server holds ", now >> 20, " MiB of Pull answers ",
        host.substr(0, 64), " has not read yet; this one (", bytes >> 20,
        " MiB) would pass the bound of ", bytes_per_peer_ >> 20,
        " MiB (--max_unread_mb_per_peer): read the answers, then retry"));
  }
  held += bytes;
  return Hold(this, std::move(host), bytes);
}

void PeerBudget::Release(const std::string& host, uint64_t bytes) {
  MutexLock lock(&mu_);
  auto it = held_.find(host);
  if (it == held_.end()) return;
  it->second -= std::min(it->second, bytes);
  if (it->second == 0) held_.erase(it);
}

uint64_t PeerBudget::held(absl::string_view peer) const {
  MutexLock lock(&mu_);
  auto it = held_.find(wire::PeerHost(peer));
  return it == held_.end() ? 0 : it->second;
}

}  // namespace embedps::server
