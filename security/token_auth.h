// Bearer tokens on a TLS port: who may call what.
//
// Two tokens: the training token may call everything; the read-only token
// only what changes nothing (Access::kRead below: serving Lookup, Version
// and DenseModel, Predict, Stats, ListTables, and Subscribe, the stream
// serving replicas follow training with). The gRPC health service needs
// no token, so that an orchestrator's probe (Kubernetes' grpc probe sends
// none) can reach it; it tells only whether the server serves.
//
// The check runs in gRPC's server auth filter, before any handler, for
// every method of every service on the port: a method this file does not
// list needs the training token, so a service added later is closed until
// someone opens it here. A call without a token, or with one the server
// does not hold, fails with UNAUTHENTICATED; a read-only token calling a
// training method with PERMISSION_DENIED; neither reaches the handler.
//
// Thread safety: the processor is immutable after construction.
#ifndef EMBEDPS_SECURITY_TOKEN_AUTH_H_
#define EMBEDPS_SECURITY_TOKEN_AUTH_H_

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/security/auth_metadata_processor.h"

namespace embedps::security {

enum class Access { kOpen, kRead, kTrain };

// What a call of `method` ("/package.Service/Method") needs.
Access AccessFor(absl::string_view method);

// A processor accepting `train_token` for every method and `read_token`
// for kRead ones; an empty token is never accepted. REQUIRES: at least one
// token non-empty.
std::shared_ptr<grpc::AuthMetadataProcessor> NewTokenProcessor(
    std::string train_token, std::string read_token);

// The name of the AuthContext property the processor sets to "train" or
// "read" on an accepted call.
inline constexpr char kAccessProperty[] = "embedps_access";

}  // namespace embedps::security

#endif  // EMBEDPS_SECURITY_TOKEN_AUTH_H_
