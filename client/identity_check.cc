#include "client/identity_check.h"

#include "absl/strings/str_cat.h"

namespace embedps::client {
namespace {

const char* RoleName(proto::ServerIdentity::Role role) {
  switch (role) {
    case proto::ServerIdentity::TRAINING:
      return "training shard";
    case proto::ServerIdentity::SERVING:
      return "serving shard";
    case proto::ServerIdentity::COORDINATOR:
      return "coordinator";
    default:
      return "server of an unknown role";
  }
}

std::string Cluster(const std::string& id) {
  // What a server sent is quoted at most 128 bytes long.
  return id.empty() ? "no named cluster"
                    : absl::StrCat("cluster '", id.substr(0, 128), "'");
}

std::string At(absl::Span<const StatedIdentity> stated, size_t i) {
  return absl::StrCat("server ", i, " (", stated[i].address.substr(0, 256),
                      ") says it is ", DescribeIdentity(stated[i].identity));
}

}  // namespace

std::string DescribeIdentity(const proto::ServerIdentity& identity) {
  if (identity.role() == proto::ServerIdentity::COORDINATOR) {
    return absl::StrCat("the coordinator of ", Cluster(identity.cluster_id()));
  }
  return absl::StrCat("a ", RoleName(identity.role()), " ",
                      identity.shard_index(), " of ", identity.num_shards(),
                      " of ", Cluster(identity.cluster_id()));
}

absl::Status CheckIdentities(absl::Span<const StatedIdentity> stated,
                             proto::ServerIdentity::Role role,
                             const std::string& cluster_id) {
  const size_t n = stated.size();
  const std::string expected =
      absl::StrCat("a ", RoleName(role), " i of ", n, " at position i");
  const auto refuse = [&](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the servers given are not one cluster's ", RoleName(role),
        "s in "
        "order (expected ",
        expected, "): ", what,
        ". Nothing was sent to any of them; check each server's "
        "--shard_index, --num_shards, --role and --cluster_id against the "
        "list"));
  };
  const std::string& want =
      cluster_id.empty() ? stated[0].identity.cluster_id() : cluster_id;
  for (size_t i = 0; i < n; ++i) {
    const proto::ServerIdentity& identity = stated[i].identity;
    if (identity.role() != role) return refuse(At(stated, i));
    if (identity.cluster_id() == want) continue;
    if (!cluster_id.empty()) {
      return refuse(
          absl::StrCat(At(stated, i), ", not of ", Cluster(cluster_id)));
    }
    return refuse(absl::StrCat(At(stated, i), "; ", At(stated, 0)));
  }
  // Two positions claiming one shard: both named.
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (stated[i].identity.shard_index() ==
          stated[j].identity.shard_index()) {
        return refuse(absl::StrCat(At(stated, i), "; ", At(stated, j),
                                   ": both claim shard ",
                                   stated[i].identity.shard_index()));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const proto::ServerIdentity& identity = stated[i].identity;
    if (identity.num_shards() != static_cast<int64_t>(n)) {
      return refuse(absl::StrCat(At(stated, i), ", but the list has ", n));
    }
    if (identity.shard_index() != static_cast<int64_t>(i)) {
      // The server that says it is shard i, if one does: both named.
      for (size_t j = 0; j < n; ++j) {
        if (stated[j].identity.shard_index() == static_cast<int64_t>(i)) {
          return refuse(absl::StrCat(At(stated, i), ", at position ", i, "; ",
                                     At(stated, j), ", at position ", j));
        }
      }
      return refuse(absl::StrCat(At(stated, i), ", but it is at position ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckServingReplica(const StatedIdentity& stated, int32_t shard,
                                 int32_t shards,
                                 const std::string& cluster_id) {
  const proto::ServerIdentity& identity = stated.identity;
  if (identity.role() == proto::ServerIdentity::SERVING &&
      identity.shard_index() == shard && identity.num_shards() == shards &&
      identity.cluster_id() == cluster_id) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "replica ", stated.address.substr(0, 256),
      " is listed for serving shard ", shard, " of ", shards, " of ",
      Cluster(cluster_id), " but says it is ", DescribeIdentity(identity),
      "; it is not used (check its --role, --shard_index, --num_shards and "
      "--cluster_id against the client's list)"));
}

}  // namespace embedps::client
