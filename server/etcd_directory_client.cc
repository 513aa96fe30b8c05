#include "server/etcd_directory_client.h"

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"

namespace embedps::server {
namespace {

using control::EtcdCompare;
using control::EtcdWrite;
using nlohmann::json;

uint64_t NewLineage() {
  static std::mt19937_64 rng(std::random_device{}());
  uint64_t value = 0;
  while (value == 0) value = rng();
  return value;
}

uint64_t Number(const json& object, const char* field) {
  uint64_t value = 0;
  auto it = object.find(field);
  if (it != object.end() && it->is_string()) {
    (void)absl::SimpleAtoi(it->get<std::string>(), &value);
  }
  return value;
}

struct Replica {
  std::string member;
  uint64_t incarnation = 0;
};

json ReplicaJson(const Replica& replica) {
  return {{"member", replica.member},
          {"incarnation", std::to_string(replica.incarnation)}};
}

std::string InSyncValue(const std::vector<Replica>& in_sync) {
  json list = json::array();
  for (const Replica& replica : in_sync) list.push_back(ReplicaJson(replica));
  return list.dump();
}

std::string PrimaryValue(const Replica& primary, uint64_t lineage) {
  json value = ReplicaJson(primary);
  value["lineage"] = std::to_string(lineage);
  return value.dump();
}

}  // namespace

// What a shard's keys said at one revision.
struct EtcdDirectoryClient::State {
  std::string prefix;
  // primary
  bool has_primary = false;
  Replica primary;
  uint64_t lineage = 0;
  int64_t primary_revision = 0;  // mod_revision: the epoch
  // in_sync
  std::vector<Replica> in_sync;
  int64_t in_sync_revision = 0;
  // members/<address>: incarnation and mod_revision
  struct Live {
    uint64_t incarnation = 0;
    int64_t revision = 0;
    int64_t lease = 0;
  };
  absl::flat_hash_map<std::string, Live> live;

  std::string key(const std::string& suffix) const { return prefix + suffix; }
  std::string member_key(const std::string& member) const {
    return prefix + "members/" + member;
  }
  // Is `replica` (that incarnation) alive?
  bool alive(const Replica& replica) const {
    auto it = live.find(replica.member);
    return it != live.end() && it->second.incarnation == replica.incarnation;
  }
  int64_t member_revision(const std::string& member) const {
    auto it = live.find(member);
    return it == live.end() ? 0 : it->second.revision;
  }
  // The live in-sync replica with the least address, other than `not_this`.
  const Replica* successor(const std::string& not_this) const {
    const Replica* best = nullptr;
    for (const Replica& replica : in_sync) {
      if (replica.member == not_this || !alive(replica)) continue;
      if (best == nullptr || replica.member < best->member) best = &replica;
    }
    return best;
  }
  proto::ReplicaView View(int32_t shard, int64_t ttl_seconds) const {
    proto::ReplicaView view;
    view.set_shard(shard);
    view.set_epoch(static_cast<uint64_t>(primary_revision));
    if (has_primary && !primary.member.empty()) {
      view.set_primary(primary.member);
      view.set_lineage(lineage);
    }
    for (const Replica& replica : in_sync) view.add_in_sync(replica.member);
    view.set_lease_ms(static_cast<uint32_t>(ttl_seconds * 1000));
    return view;
  }
};

absl::StatusOr<std::unique_ptr<EtcdDirectoryClient>>
EtcdDirectoryClient::Connect(control::EtcdOptions etcd,
                             EtcdDirectoryOptions options) {
  ASSIGN_OR_RETURN(std::unique_ptr<control::EtcdClient> client,
                   control::EtcdClient::Create(std::move(etcd)));
  return std::make_unique<EtcdDirectoryClient>(std::move(client),
                                               std::move(options));
}

EtcdDirectoryClient::EtcdDirectoryClient(
    std::unique_ptr<control::EtcdClient> etcd, EtcdDirectoryOptions options)
    : etcd_(std::move(etcd)), options_(std::move(options)) {}

std::string EtcdDirectoryClient::Describe() const {
  return absl::StrCat("etcd ", etcd_->endpoints());
}

std::string EtcdDirectoryClient::ShardPrefix(int32_t shard) const {
  return absl::StrCat(
      "/embedps/",
      options_.cluster_id.empty() ? "default" : options_.cluster_id, "/shards/",
      shard, "/");
}

absl::StatusOr<EtcdDirectoryClient::State> EtcdDirectoryClient::Read(
    int32_t shard) {
  State state;
  state.prefix = ShardPrefix(shard);
  ASSIGN_OR_RETURN(control::EtcdRange range,
                   etcd_->Get(state.prefix, /*prefix=*/true));
  for (const control::EtcdKeyValue& kv : range.kvs) {
    absl::string_view suffix = kv.key;
    suffix.remove_prefix(state.prefix.size());
    const json value = json::parse(kv.value, nullptr, false);
    if (value.is_discarded()) {
      return absl::DataLossError(
          absl::StrCat("etcd key ", kv.key, " holds a value that is not JSON"));
    }
    if (suffix == "primary") {
      state.has_primary = true;
      state.primary_revision = kv.mod_revision;
      if (value.is_object()) {
        state.primary.member = value.value("member", "");
        state.primary.incarnation = Number(value, "incarnation");
        state.lineage = Number(value, "lineage");
      }
    } else if (suffix == "in_sync") {
      state.in_sync_revision = kv.mod_revision;
      if (value.is_array()) {
        for (const json& entry : value) {
          if (!entry.is_object()) continue;
          state.in_sync.push_back(
              {entry.value("member", ""), Number(entry, "incarnation")});
        }
      }
    } else if (absl::ConsumePrefix(&suffix, "members/")) {
      if (value.is_object()) {
        state.live[std::string(suffix)] = {Number(value, "incarnation"),
                                           kv.mod_revision, kv.lease};
      }
    }
  }
  return state;
}

absl::StatusOr<int64_t> EtcdDirectoryClient::KeepLease(
    const proto::HeartbeatRequest& request) {
  int64_t ttl = 0;
  if (lease_ != 0) {
    ASSIGN_OR_RETURN(ttl, etcd_->KeepAlive(lease_));
  }
  if (ttl <= 0 || member_incarnation_ != request.incarnation()) {
    // First heartbeat, or the lease expired (etcd deleted the member key):
    // a new lease and the key again.
    const int64_t wanted = std::max<int64_t>(
        1, (absl::ToInt64Milliseconds(options_.lease) + 999) / 1000);
    ASSIGN_OR_RETURN(control::EtcdLease lease, etcd_->Grant(wanted));
    lease_ = lease.id;
    ttl = lease.ttl_seconds;
    const json value = {{"incarnation", std::to_string(request.incarnation())}};
    RETURN_IF_ERROR(
        etcd_
            ->Put(ShardPrefix(request.shard()) + "members/" + request.member(),
                  value.dump(), lease_)
            .status());
    member_incarnation_ = request.incarnation();
  }
  ttl_seconds_ = ttl;
  return ttl;
}

absl::StatusOr<proto::ReplicaView> EtcdDirectoryClient::Heartbeat(
    const proto::HeartbeatRequest& request, absl::Time deadline) {
  if (request.shard() < 0 || request.member().empty() ||
      request.incarnation() == 0 || absl::StrContains(request.member(), '/')) {
    return absl::InvalidArgumentError(
        "Heartbeat needs shard >= 0, a member address without '/' and an "
        "incarnation");
  }
  MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const int64_t ttl, KeepLease(request));
  const Replica me{request.member(), request.incarnation()};
  // Each pass reads the shard and makes at most one change; a change lost
  // to another replica's is read again.
  for (int pass = 0; pass < 16 && absl::Now() < deadline; ++pass) {
    ASSIGN_OR_RETURN(State state, Read(request.shard()));
    std::vector<EtcdCompare> unchanged = {
        EtcdCompare::ModifiedAt(state.key("primary"), state.primary_revision),
        EtcdCompare::ModifiedAt(state.key("in_sync"), state.in_sync_revision)};
    std::vector<EtcdWrite> writes;
    const auto make_primary = [&](const Replica& who, uint64_t lineage) {
      writes.push_back(
          EtcdWrite::Put(state.key("primary"), PrimaryValue(who, lineage)));
      writes.push_back(
          EtcdWrite::Put(state.key("in_sync"), InSyncValue({who})));
      unchanged.push_back(EtcdCompare::ModifiedAt(
          state.member_key(who.member), state.member_revision(who.member)));
    };
    const Replica& primary = state.primary;
    if (!state.has_primary || primary.member.empty()) {
      // The shard's first replica, or one after all its data was lost.
      make_primary(me, NewLineage());
    } else if (!state.alive(primary)) {
      // The primary is gone (lease expired) or restarted.
      unchanged.push_back(
          EtcdCompare::ModifiedAt(state.member_key(primary.member),
                                  state.member_revision(primary.member)));
      const bool restarted = state.live.contains(primary.member);
      if (const Replica* next = state.successor(primary.member)) {
        make_primary(*next, state.lineage);
      } else if (restarted) {
        // Nobody holds the shard's data any more: a new lineage.
        make_primary(me, NewLineage());
      }
      // Else the shard waits for its primary (or an in-sync replica).
    } else {
      // This replica restarted while listed in sync: it is not any more.
      std::vector<Replica> kept;
      for (const Replica& replica : state.in_sync) {
        if (replica.member != me.member ||
            replica.incarnation == me.incarnation) {
          kept.push_back(replica);
        }
      }
      if (kept.size() != state.in_sync.size()) {
        writes.push_back(
            EtcdWrite::Put(state.key("in_sync"), InSyncValue(kept)));
      }
    }
    if (writes.empty()) return state.View(request.shard(), ttl);
    ASSIGN_OR_RETURN(control::EtcdTxnResult result,
                     etcd_->Txn(unchanged, writes));
    (void)result;  // read again either way
  }
  return absl::DeadlineExceededError(
      absl::StrCat("shard ", request.shard(), ": the view in ", Describe(),
                   " kept changing under this heartbeat"));
}

absl::StatusOr<proto::ReplicaView> EtcdDirectoryClient::View(int32_t shard) {
  ASSIGN_OR_RETURN(State state, Read(shard));
  if (!state.has_primary) {
    return absl::NotFoundError(
        absl::StrCat("shard ", shard, " has no replicas in ", Describe()));
  }
  // The primary's lease, as it was granted (0 when none is alive).
  int64_t ttl = 0;
  if (auto it = state.live.find(state.primary.member);
      it != state.live.end() && it->second.lease != 0) {
    absl::StatusOr<int64_t> granted = etcd_->GrantedTtl(it->second.lease);
    if (granted.ok()) ttl = *granted;
  }
  return state.View(shard, ttl);
}

absl::StatusOr<proto::ReplicaView> EtcdDirectoryClient::Report(
    const proto::ReplicaReport& report, absl::Time deadline) {
  int64_t ttl;
  {
    MutexLock lock(&mu_);
    ttl = ttl_seconds_;
  }
  for (int pass = 0; pass < 16 && absl::Now() < deadline; ++pass) {
    ASSIGN_OR_RETURN(State state, Read(report.shard()));
    if (!state.has_primary ||
        static_cast<uint64_t>(state.primary_revision) != report.epoch() ||
        state.primary.member != report.primary()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "shard ", report.shard(), ": ", report.primary(), " of epoch ",
          report.epoch(), " is not the primary (epoch ", state.primary_revision,
          ": ", state.primary.member.empty() ? "none" : state.primary.member,
          ")"));
    }
    if (report.subject() == report.primary()) {
      return absl::InvalidArgumentError("a primary cannot report itself");
    }
    std::vector<Replica> next;
    bool listed = false;
    for (const Replica& replica : state.in_sync) {
      if (replica.member == report.subject()) {
        listed = true;
      } else {
        next.push_back(replica);
      }
    }
    auto live = state.live.find(report.subject());
    if (report.kind() == proto::ReplicaReport::IN_SYNC) {
      if (live == state.live.end()) {
        return absl::NotFoundError(absl::StrCat("shard ", report.shard(),
                                                " has no live replica ",
                                                report.subject()));
      }
      next.push_back({report.subject(), live->second.incarnation});
    } else if (!listed) {
      // FAILED: nothing to remove.
      if (live == state.live.end()) {
        return absl::NotFoundError(absl::StrCat(
            "shard ", report.shard(), " has no replica ", report.subject()));
      }
      return state.View(report.shard(), ttl);
    }
    ASSIGN_OR_RETURN(
        control::EtcdTxnResult result,
        etcd_->Txn({EtcdCompare::ModifiedAt(state.key("primary"),
                                            state.primary_revision),
                    EtcdCompare::ModifiedAt(state.key("in_sync"),
                                            state.in_sync_revision)},
                   {EtcdWrite::Put(state.key("in_sync"), InSyncValue(next))}));
    if (result.succeeded) {
      state.in_sync = std::move(next);
      return state.View(report.shard(), ttl);
    }
  }
  return absl::DeadlineExceededError(
      absl::StrCat("shard ", report.shard(), ": the view in ", Describe(),
                   " kept changing under this report"));
}

}  // namespace embedps::server
