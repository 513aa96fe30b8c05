#include "control/etcd_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"

namespace embedps::control {
namespace {

void ToOp(const EtcdWrite& write, etcdserverpb::RequestOp* op) {
  if (write.erase) {
    op->mutable_request_delete_range()->set_key(write.key);
    return;
  }
  etcdserverpb::PutRequest* put = op->mutable_request_put();
  put->set_key(write.key);
  put->set_value(write.value);
  put->set_lease(write.lease);
}

}  // namespace

EtcdCompare EtcdCompare::Absent(std::string key) {
  EtcdCompare compare;
  compare.key = std::move(key);
  compare.target = Target::kCreateRevision;
  compare.revision = 0;
  return compare;
}

EtcdCompare EtcdCompare::ModifiedAt(std::string key, int64_t revision) {
  if (revision == 0) return Absent(std::move(key));
  EtcdCompare compare;
  compare.key = std::move(key);
  compare.target = Target::kModRevision;
  compare.revision = revision;
  return compare;
}

EtcdWrite EtcdWrite::Put(std::string key, std::string value, int64_t lease) {
  EtcdWrite write;
  write.key = std::move(key);
  write.value = std::move(value);
  write.lease = lease;
  return write;
}

EtcdWrite EtcdWrite::Delete(std::string key) {
  EtcdWrite write;
  write.key = std::move(key);
  write.erase = true;
  return write;
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    EtcdOptions options) {
  const std::string& given = options.endpoints;
  bool tls = false;
  absl::string_view rest = given;
  if (absl::ConsumePrefix(&rest, "etcds://")) {
    tls = true;
  } else if (!absl::ConsumePrefix(&rest, "etcd://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the control plane '", given,
        "' is not etcd://host:port[,host:port...] or etcds://..."));
  }
  std::vector<std::string> hosts;
  for (absl::string_view host : absl::StrSplit(rest, ',', absl::SkipEmpty())) {
    host = absl::StripAsciiWhitespace(host);
    const size_t colon = host.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(host.substr(colon + 1), &port) || port <= 0 ||
        port > 65535 || absl::StrContains(host, '/')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the control plane '", given, "': '", host, "' is not host:port"));
    }
    hosts.emplace_back(host);
  }
  if (hosts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the control plane '", given, "' names no member"));
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  security::ChannelSecurity security;
  if (tls) {
    if (options.security.ca_file.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the control plane '", given,
          "' is TLS (etcds://) but no CA file is given (--tls_ca)"));
    }
    security = options.security;
    security.token_file.clear();  // etcd authenticates by its own tokens
    ASSIGN_OR_RETURN(credentials, security::MakeChannelCredentials(security));
  }
  std::vector<Member> members;
  for (const std::string& host : hosts) {
    grpc::ChannelArguments args = security::ChannelArgumentsFor(security);
    // Reconnect soon after a member returns (gRPC's default backoff grows
    // to two minutes).
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(host, credentials, args);
    members.push_back({host, etcdserverpb::KV::NewStub(channel),
                       etcdserverpb::Lease::NewStub(channel)});
  }
  return std::unique_ptr<EtcdClient>(
      new EtcdClient(std::move(options), std::move(members)));
}

absl::Status EtcdClient::Call(
    const char* what,
    const std::function<grpc::Status(Member&, grpc::ClientContext&)>& rpc) {
  size_t first;
  {
    MutexLock lock(&mu_);
    first = preferred_;
  }
  std::vector<std::string> failures;
  for (size_t i = 0; i < members_.size(); ++i) {
    const size_t at = (first + i) % members_.size();
    Member& member = members_[at];
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
    const grpc::Status status = rpc(member, context);
    if (status.ok()) {
      MutexLock lock(&mu_);
      preferred_ = at;
      return absl::OkStatus();
    }
    // Down, or without a quorum or leader: another member may do.
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      failures.push_back(
          absl::StrCat(member.host, ": ", status.error_message()));
      continue;
    }
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("etcd ", member.host, " ", what, ": ",
                                     status.error_message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no etcd member of ", options_.endpoints, " answered ", what,
                   ": ", absl::StrJoin(failures, "; ")));
}

absl::StatusOr<EtcdRange> EtcdClient::Get(const std::string& key, bool prefix) {
  etcdserverpb::RangeRequest request;
  request.set_key(key);
  if (prefix) {
    // Every key with this prefix: up to the prefix with its last byte
    // raised (etcd's range_end convention; "\0" means "to the end").
    std::string end = key;
    while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) {
      end.pop_back();
    }
    if (end.empty()) {
      end = std::string(1, '\0');
    } else {
      end.back() = static_cast<char>(end.back() + 1);
    }
    request.set_range_end(end);
  }
  etcdserverpb::RangeResponse response;
  RETURN_IF_ERROR(Call("Range", [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Range(&c, request, &response);
  }));
  EtcdRange range;
  range.revision = response.header().revision();
  for (etcdserverpb::KeyValue& kv : *response.mutable_kvs()) {
    EtcdKeyValue out;
    out.key = std::move(*kv.mutable_key());
    out.value = std::move(*kv.mutable_value());
    out.create_revision = kv.create_revision();
    out.mod_revision = kv.mod_revision();
    out.lease = kv.lease();
    range.kvs.push_back(std::move(out));
  }
  return range;
}

absl::StatusOr<int64_t> EtcdClient::Put(const std::string& key,
                                        const std::string& value,
                                        int64_t lease) {
  etcdserverpb::PutRequest request;
  request.set_key(key);
  request.set_value(value);
  request.set_lease(lease);
  etcdserverpb::PutResponse response;
  RETURN_IF_ERROR(Call("Put", [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Put(&c, request, &response);
  }));
  return response.header().revision();
}

absl::StatusOr<EtcdTxnResult> EtcdClient::Txn(
    const std::vector<EtcdCompare>& compares,
    const std::vector<EtcdWrite>& success,
    const std::vector<EtcdWrite>& failure) {
  etcdserverpb::TxnRequest request;
  for (const EtcdCompare& compare : compares) {
    etcdserverpb::Compare* c = request.add_compare();
    c->set_key(compare.key);
    c->set_result(etcdserverpb::Compare::EQUAL);
    switch (compare.target) {
      case EtcdCompare::Target::kCreateRevision:
        c->set_target(etcdserverpb::Compare::CREATE);
        c->set_create_revision(compare.revision);
        break;
      case EtcdCompare::Target::kModRevision:
        c->set_target(etcdserverpb::Compare::MOD);
        c->set_mod_revision(compare.revision);
        break;
      case EtcdCompare::Target::kValue:
        c->set_target(etcdserverpb::Compare::VALUE);
        c->set_value(compare.value);
        break;
    }
  }
  for (const EtcdWrite& write : success) ToOp(write, request.add_success());
  for (const EtcdWrite& write : failure) ToOp(write, request.add_failure());
  etcdserverpb::TxnResponse response;
  RETURN_IF_ERROR(Call("Txn", [&](Member& m, grpc::ClientContext& c) {
    return m.kv->Txn(&c, request, &response);
  }));
  return EtcdTxnResult{response.succeeded(), response.header().revision()};
}

absl::StatusOr<EtcdLease> EtcdClient::Grant(int64_t ttl_seconds) {
  if (ttl_seconds <= 0) {
    return absl::InvalidArgumentError("a lease needs a TTL of 1 s or more");
  }
  etcdserverpb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  etcdserverpb::LeaseGrantResponse response;
  RETURN_IF_ERROR(Call("LeaseGrant", [&](Member& m, grpc::ClientContext& c) {
    return m.lease->LeaseGrant(&c, request, &response);
  }));
  if (response.id() == 0 || response.ttl() <= 0) {
    return absl::UnavailableError(
        absl::StrCat("etcd granted no lease: ", response.error()));
  }
  return EtcdLease{response.id(), response.ttl()};
}

absl::StatusOr<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveResponse response;
  RETURN_IF_ERROR(
      Call("LeaseKeepAlive", [&](Member& m, grpc::ClientContext& c) {
        // A stream of one renewal.
        auto stream = m.lease->LeaseKeepAlive(&c);
        etcdserverpb::LeaseKeepAliveRequest request;
        request.set_id(lease);
        const bool answered = stream->Write(request) && stream->Read(&response);
        stream->WritesDone();
        // Bounded by the call's deadline when a member never answers.
        const grpc::Status status = stream->Finish();
        if (answered) return grpc::Status::OK;
        return status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                          "the keepalive stream ended")
                           : status;
      }));
  return std::max<int64_t>(response.ttl(), 0);
}

absl::StatusOr<int64_t> EtcdClient::GrantedTtl(int64_t lease) {
  etcdserverpb::LeaseTimeToLiveRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseTimeToLiveResponse response;
  RETURN_IF_ERROR(
      Call("LeaseTimeToLive", [&](Member& m, grpc::ClientContext& c) {
        return m.lease->LeaseTimeToLive(&c, request, &response);
      }));
  // An expired lease answers TTL -1.
  if (response.ttl() < 0 || response.grantedttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("lease ", lease, " has expired"));
  }
  return response.grantedttl();
}

absl::Status EtcdClient::Revoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest request;
  request.set_id(lease);
  etcdserverpb::LeaseRevokeResponse response;
  const absl::Status status =
      Call("LeaseRevoke", [&](Member& m, grpc::ClientContext& c) {
        return m.lease->LeaseRevoke(&c, request, &response);
      });
  if (!status.ok() && !absl::IsNotFound(status)) return status;
  return absl::OkStatus();
}

}  // namespace embedps::control
