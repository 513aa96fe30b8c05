#include "server/replica_directory.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "wire/grpc_status.h"

namespace embedps::server {
namespace {

uint64_t NewLineage() {
  static std::mt19937_64 rng(std::random_device{}());
  uint64_t value = 0;
  while (value == 0) value = rng();
  return value;
}

bool InSync(const proto::ReplicaView& view, const std::string& member) {
  return std::find(view.in_sync().begin(), view.in_sync().end(), member) !=
         view.in_sync().end();
}

}  // namespace

ReplicaDirectory::ReplicaDirectory(ReplicaDirectoryOptions options)
    : options_(std::move(options)) {}

void ReplicaDirectory::MakePrimary(Shard& shard, const std::string& member,
                                   bool new_lineage) {
  proto::ReplicaView& view = shard.view;
  view.set_epoch(view.epoch() + 1);
  view.set_primary(member);
  view.clear_in_sync();
  view.add_in_sync(member);
  if (new_lineage) view.set_lineage(NewLineage());
}

void ReplicaDirectory::MaybeFailOver(Shard& shard, absl::Time now,
                                     bool primary_restarted) {
  proto::ReplicaView& view = shard.view;
  if (view.primary().empty()) return;
  const Member& primary = shard.members[view.primary()];
  if (!primary_restarted &&
      now - primary.last_heard <= options_.lease + options_.grace) {
    return;
  }
  // The in-sync replica heard from last takes over.
  const std::string* best = nullptr;
  absl::Time best_heard = absl::InfinitePast();
  for (const std::string& member : view.in_sync()) {
    if (member == view.primary()) continue;
    const Member& m = shard.members[member];
    if (now - m.last_heard <= options_.lease && m.last_heard > best_heard) {
      best = &member;
      best_heard = m.last_heard;
    }
  }
  if (best != nullptr) {
    const std::string chosen = *best;
    MakePrimary(shard, chosen, /*new_lineage=*/false);
    return;
  }
  // None can take over: the shard waits for its primary, whose state is
  // the only complete one — unless that process is gone for good.
  if (primary_restarted) {
    view.set_primary("");
    view.clear_in_sync();
  }
}

absl::StatusOr<proto::ReplicaView> ReplicaDirectory::Heartbeat(
    const proto::HeartbeatRequest& request) {
  if (request.shard() < 0 || request.member().empty() ||
      request.incarnation() == 0) {
    return absl::InvalidArgumentError(
        "Heartbeat needs shard >= 0, a member address and an incarnation");
  }
  const absl::Time now = options_.clock();
  MutexLock lock(&mu_);
  auto found = shards_.find(request.shard());
  if (found == shards_.end()) {
    if (static_cast<int32_t>(shards_.size()) >= options_.max_shards) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the replica directory tracks ", options_.max_shards,
                       " shards already; shard ", request.shard(), " refused"));
    }
    found = shards_.emplace(request.shard(), Shard{}).first;
    found->second.view.set_shard(request.shard());
    found->second.view.set_lease_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.lease)));
  }
  Shard& shard = found->second;
  auto member = shard.members.find(request.member());
  if (member == shard.members.end()) {
    if (static_cast<int32_t>(shard.members.size()) >= options_.max_members) {
      return absl::ResourceExhaustedError(
          absl::StrCat("shard ", request.shard(), " has ", options_.max_members,
                       " replicas already; ", request.member(), " refused"));
    }
    member = shard.members.emplace(request.member(), Member{}).first;
  }
  const bool restarted = member->second.incarnation != 0 &&
                         member->second.incarnation != request.incarnation();
  member->second.incarnation = request.incarnation();
  member->second.last_heard = now;
  proto::ReplicaView& view = shard.view;
  if (restarted) {
    if (view.primary() == request.member()) {
      MaybeFailOver(shard, now, /*primary_restarted=*/true);
    } else if (InSync(view, request.member())) {
      auto* in_sync = view.mutable_in_sync();
      in_sync->erase(
          std::remove(in_sync->begin(), in_sync->end(), request.member()),
          in_sync->end());
    }
  } else {
    MaybeFailOver(shard, now, /*primary_restarted=*/false);
  }
  if (view.primary().empty()) {
    // The first replica, or one arriving after all of the shard's data was
    // lost: a new lineage.
    MakePrimary(shard, request.member(), /*new_lineage=*/true);
  }
  return view;
}

absl::StatusOr<proto::ReplicaView> ReplicaDirectory::Report(
    const proto::ReplicaReport& report) {
  const absl::Time now = options_.clock();
  MutexLock lock(&mu_);
  auto found = shards_.find(report.shard());
  if (found == shards_.end()) {
    return absl::NotFoundError(
        absl::StrCat("shard ", report.shard(), " has no replicas"));
  }
  Shard& shard = found->second;
  MaybeFailOver(shard, now, /*primary_restarted=*/false);
  proto::ReplicaView& view = shard.view;
  if (report.epoch() != view.epoch() || report.primary() != view.primary()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "shard ", report.shard(), ": ", report.primary(), " of epoch ",
        report.epoch(), " is not the primary (epoch ", view.epoch(), ": ",
        view.primary().empty() ? "none" : view.primary(), ")"));
  }
  if (!shard.members.contains(report.subject())) {
    return absl::NotFoundError(absl::StrCat(
        "shard ", report.shard(), " has no replica ", report.subject()));
  }
  if (report.subject() == view.primary()) {
    return absl::InvalidArgumentError("a primary cannot report itself");
  }
  auto* in_sync = view.mutable_in_sync();
  in_sync->erase(
      std::remove(in_sync->begin(), in_sync->end(), report.subject()),
      in_sync->end());
  if (report.kind() == proto::ReplicaReport::IN_SYNC) {
    view.add_in_sync(report.subject());
  }
  return view;
}

absl::StatusOr<proto::ReplicaView> ReplicaDirectory::View(int32_t shard) {
  const absl::Time now = options_.clock();
  MutexLock lock(&mu_);
  auto found = shards_.find(shard);
  if (found == shards_.end()) {
    return absl::NotFoundError(
        absl::StrCat("shard ", shard, " has no replicas"));
  }
  MaybeFailOver(found->second, now, /*primary_restarted=*/false);
  return found->second.view;
}

grpc::Status ReplicaDirectoryServiceImpl::Heartbeat(
    grpc::ServerContext*, const proto::HeartbeatRequest* request,
    proto::HeartbeatResponse* response) {
  return metrics_->Measure(RpcMethod::kReplicaHeartbeat, [&] {
    absl::StatusOr<proto::ReplicaView> view = directory_->Heartbeat(*request);
    if (!view.ok()) return wire::ToGrpcStatus(view.status());
    *response->mutable_view() = *std::move(view);
    return grpc::Status::OK;
  });
}

grpc::Status ReplicaDirectoryServiceImpl::Report(
    grpc::ServerContext*, const proto::ReplicaReport* request,
    proto::ReplicaReportResponse* response) {
  return metrics_->Measure(RpcMethod::kReplicaReport, [&] {
    absl::StatusOr<proto::ReplicaView> view = directory_->Report(*request);
    if (!view.ok()) return wire::ToGrpcStatus(view.status());
    *response->mutable_view() = *std::move(view);
    return grpc::Status::OK;
  });
}

grpc::Status ReplicaDirectoryServiceImpl::View(
    grpc::ServerContext*, const proto::ReplicaViewRequest* request,
    proto::ReplicaView* response) {
  return metrics_->Measure(RpcMethod::kReplicaView, [&] {
    absl::StatusOr<proto::ReplicaView> view =
        directory_->View(request->shard());
    if (!view.ok()) return wire::ToGrpcStatus(view.status());
    *response = *std::move(view);
    return grpc::Status::OK;
  });
}

}  // namespace embedps::server
