#include "worker/etcd_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace embedps::worker {

absl::StatusOr<std::unique_ptr<EtcdStore>> EtcdStore::Create(
    std::unique_ptr<control::EtcdClient> etcd, absl::Duration lease) {
  const int64_t wanted =
      std::max<int64_t>(1, (absl::ToInt64Milliseconds(lease) + 999) / 1000);
  ASSIGN_OR_RETURN(control::EtcdLease granted, etcd->Grant(wanted));
  return std::unique_ptr<EtcdStore>(new EtcdStore(
      std::move(etcd), granted.id, absl::Seconds(granted.ttl_seconds)));
}

EtcdStore::EtcdStore(std::unique_ptr<control::EtcdClient> etcd, int64_t lease,
                     absl::Duration ttl)
    : etcd_(std::move(etcd)), lease_(lease), ttl_(ttl) {
  keepalive_ = std::thread([this] { KeepAlive(); });
}

EtcdStore::~EtcdStore() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  stop_cv_.SignalAll();
  keepalive_.join();
  // The job's keys go with this worker (best effort: they expire anyway).
  (void)etcd_->Revoke(lease_);
}

void EtcdStore::KeepAlive() {
  MutexLock lock(&mu_);
  while (!stopping_) {
    stop_cv_.WaitWithTimeout(&mu_, ttl_ / 3);
    if (stopping_) break;
    mu_.Unlock();
    absl::StatusOr<int64_t> ttl = etcd_->KeepAlive(lease_);
    if (!ttl.ok() || *ttl == 0) {
      Logger("rendezvous")
          ->warn("the rendezvous lease in {} was not renewed: {}",
                 etcd_->endpoints(),
                 ttl.ok() ? "it expired" : ttl.status().ToString());
    }
    mu_.Lock();
  }
}

std::string EtcdStore::EtcdKey(const std::string& key) {
  return absl::StrCat("/embedps/rendezvous/", key);
}

absl::Status EtcdStore::Set(const std::string& key, const std::string& value) {
  return etcd_->Put(EtcdKey(key), value, lease_).status();
}

absl::StatusOr<std::string> EtcdStore::Get(const std::string& key) {
  ASSIGN_OR_RETURN(control::EtcdRange range, etcd_->Get(EtcdKey(key)));
  if (range.kvs.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "rendezvous key '", key, "' is not set in ", etcd_->endpoints()));
  }
  return std::move(range.kvs[0].value);
}

absl::Status EtcdStore::Wait(const std::vector<std::string>& keys,
                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::string> missing = keys;
  while (true) {
    std::vector<std::string> still;
    for (const std::string& key : missing) {
      absl::StatusOr<std::string> value = Get(key);
      if (absl::IsNotFound(value.status())) {
        still.push_back(key);
      } else if (!value.ok()) {
        return value.status();
      }
    }
    if (still.empty()) return absl::OkStatus();
    missing = std::move(still);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rendezvous keys not set within ", absl::FormatDuration(timeout),
          " in ", etcd_->endpoints(), ": ", absl::StrJoin(missing, ", ")));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace embedps::worker
