#include "security/health_service.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "wire/peer_host.h"

namespace embedps::security {
namespace {

using grpc::health::v1::HealthCheckResponse;
using Status = HealthCheckResponse::ServingStatus;

// A Watch refused at once.
class Refused final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  explicit Refused(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

// One Watch stream: writes each status it is told, one write at a time
// (the newest status wins while a write is in flight).
class HealthService::Watcher final
    : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string peer)
      : service_(service), peer_(std::move(peer)) {}

  const std::string& peer() const { return peer_; }

  // `last`: finish the stream once this status is written.
  void Tell(Status status, bool last) {
    MutexLock lock(&mu_);
    pending_ = status;
    has_pending_ = true;
    finish_after_ = finish_after_ || last;
    Advance();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) finish_after_ = true;  // the stream broke: end it
    if (!ok) has_pending_ = false;
    Advance();
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    has_pending_ = false;
    finish_after_ = true;
    Advance();
  }

  void OnDone() override {
    service_->Remove(this);
    delete this;
  }

 private:
  void Advance() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    if (has_pending_) {
      response_.set_status(pending_);
      has_pending_ = false;
      writing_ = true;
      StartWrite(&response_);
      return;
    }
    if (finish_after_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  HealthService* const service_;
  const std::string peer_;
  Mutex mu_;
  HealthCheckResponse response_ ABSL_GUARDED_BY(mu_);
  Status pending_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool has_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_after_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

void HealthService::Shutdown() {
  MutexLock lock(&mu_);
  serving_ = false;
  for (Watcher* watcher : watchers_) {
    watcher->Tell(HealthCheckResponse::NOT_SERVING, /*last=*/true);
  }
}

void HealthService::Remove(Watcher* watcher) {
  MutexLock lock(&mu_);
  watchers_.erase(watcher);
  auto it = per_peer_.find(watcher->peer());
  if (it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
}

size_t HealthService::watches() {
  MutexLock lock(&mu_);
  return watchers_.size();
}

grpc::ServerUnaryReactor* HealthService::Check(
    grpc::CallbackServerContext* context,
    const grpc::health::v1::HealthCheckRequest* request,
    HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!request->service().empty()) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("no health status for service '", request->service(),
                     "': ask for the server as a whole (service \"\")")));
    return reactor;
  }
  {
    MutexLock lock(&mu_);
    response->set_status(serving_ ? HealthCheckResponse::SERVING
                                  : HealthCheckResponse::NOT_SERVING);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context,
    const grpc::health::v1::HealthCheckRequest* request) {
  std::string peer = wire::PeerHost(context->peer());
  MutexLock lock(&mu_);
  if (watchers_.size() >= max_watches_) {
    return new Refused(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(max_watches_,
                     " health Watch streams are open already; use Check "
                     "(or fewer watchers)")));
  }
  size_t& of_peer = per_peer_[peer];
  if (of_peer >= max_watches_per_peer_) {
    return new Refused(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(of_peer, " health Watch streams of ", peer.substr(0, 64),
                     " are open already (at most ", max_watches_per_peer_,
                     " a host); use Check (or fewer watchers)")));
  }
  ++of_peer;
  auto* watcher = new Watcher(this, std::move(peer));
  watchers_.insert(watcher);
  if (!request->service().empty()) {
    watcher->Tell(HealthCheckResponse::SERVICE_UNKNOWN, /*last=*/!serving_);
  } else {
    watcher->Tell(serving_ ? HealthCheckResponse::SERVING
                           : HealthCheckResponse::NOT_SERVING,
                  /*last=*/!serving_);
  }
  return watcher;
}

}  // namespace embedps::security
