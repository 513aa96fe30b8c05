// PeerBudget: the bytes of answers a server has computed for each peer and
// the peer has not yet taken, bounded per peer.
//
// A Pull's answer is built in full before gRPC sends it, and gRPC holds it
// until the peer reads it (HTTP/2 flow control): a peer that opens Pull
// streams and never reads them would make the server hold ~100 MB for each
// 48 KB request. The training service takes a Hold of an answer's bytes
// before it builds one and lets it go when gRPC is done with the call; a
// peer (an address without its port: every connection of a host
// together) holding `bytes_per_peer` already is told to come back later.
// A peer that holds nothing is always granted one answer, however large
// (the message limit bounds it), so the bound never refuses a lone call.
//
// Thread safety: thread-safe.
#ifndef EMBEDPS_SERVER_PEER_BUDGET_H_
#define EMBEDPS_SERVER_PEER_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace embedps::server {

class PeerBudget {
 public:
  // `bytes_per_peer` 0: no bound (holds are still counted).
  explicit PeerBudget(uint64_t bytes_per_peer)
      : bytes_per_peer_(bytes_per_peer) {}

  // Bytes held for one peer until destroyed (movable, not copyable).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept { *this = std::move(other); }
    Hold& operator=(Hold&& other) noexcept;
    ~Hold() { Release(); }

   private:
    friend class PeerBudget;
    Hold(PeerBudget* budget, std::string peer, uint64_t bytes)
        : budget_(budget), peer_(std::move(peer)), bytes_(bytes) {}
    void Release();

    PeerBudget* budget_ = nullptr;
    std::string peer_;
    uint64_t bytes_ = 0;
  };

  // Holds `bytes` for the peer of gRPC's `peer` string ("ipv4:10.0.0.5:
  // 41234"). UNAVAILABLE (a client retries after a backoff) if the peer
  // already holds bytes and would pass the bound, naming both figures and
  // --max_unread_mb_per_peer.
  absl::StatusOr<Hold> Acquire(absl::string_view peer, uint64_t bytes);

  // Bytes held for the host of `peer` now (wire/peer_host.h).
  uint64_t held(absl::string_view peer) const;

 private:
  void Release(const std::string& host, uint64_t bytes);

  const uint64_t bytes_per_peer_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, uint64_t> held_ ABSL_GUARDED_BY(mu_);
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_PEER_BUDGET_H_
