#include "security/token_auth.h"

#include <openssl/crypto.h>

#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace embedps::security {
namespace {

constexpr absl::string_view kBearer = "Bearer ";

// Methods a read-only token may call; anything else needs the training
// token.
constexpr absl::string_view kReadMethods[] = {
    "/embedps.proto.StatsService/Stats",
    "/embedps.proto.StatsService/Identify",
    "/embedps.proto.TrainingService/ListTables",
    "/embedps.proto.TrainingService/Subscribe",
    "/embedps.proto.ServingService/Lookup",
    "/embedps.proto.ServingService/Version",
    "/embedps.proto.ServingService/DenseModel",
    "/embedps.proto.Predictor/Predict",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
};

bool SameToken(absl::string_view sent, const std::string& held) {
  // Constant time in the contents, so that the time a refusal takes does
  // not tell how much of a guess was right.
  return !held.empty() && sent.size() == held.size() &&
         CRYPTO_memcmp(sent.data(), held.data(), held.size()) == 0;
}

class TokenProcessor : public grpc::AuthMetadataProcessor {
 public:
  TokenProcessor(std::string train, std::string read)
      : train_(std::move(train)), read_(std::move(read)) {}

  // The check is a few comparisons: run it on the call's own thread.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& metadata,
                       grpc::AuthContext* context, OutputMetadata* consumed,
                       OutputMetadata* response) override {
    absl::string_view method;
    if (auto it = metadata.find(":path"); it != metadata.end()) {
      method = absl::string_view(it->second.data(), it->second.size());
    }
    const Access needed = AccessFor(method);
    if (needed == Access::kOpen) return grpc::Status::OK;
    const auto it = metadata.find("authorization");
    if (it == metadata.end()) {
      return grpc::Status(
          grpc::StatusCode::UNAUTHENTICATED,
          absl::StrCat("no token: this server takes calls of ", method,
                       " only with 'authorization: Bearer TOKEN' metadata "
                       "(the client's token_file)"));
    }
    absl::string_view sent(it->second.data(), it->second.size());
    if (!absl::ConsumePrefix(&sent, kBearer)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the authorization metadata is not 'Bearer TOKEN'");
    }
    const char* access = nullptr;
    if (SameToken(sent, train_)) {
      access = "train";
    } else if (SameToken(sent, read_)) {
      if (needed == Access::kTrain) {
        return grpc::Status(
            grpc::StatusCode::PERMISSION_DENIED,
            absl::StrCat("the read-only token cannot call ", method,
                         ": it needs the training token"));
      }
      access = "read";
    } else {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "the token is not one this server accepts");
    }
    // The token goes no further than this check.
    consumed->emplace(std::string(it->first.data(), it->first.size()),
                      std::string(it->second.data(), it->second.size()));
    context->AddProperty(kAccessProperty, access);
    return grpc::Status::OK;
  }

 private:
  const std::string train_;
  const std::string read_;
};

}  // namespace

Access AccessFor(absl::string_view method) {
  if (absl::StartsWith(method, "/grpc.health.v1.Health/")) return Access::kOpen;
  for (absl::string_view read : kReadMethods) {
    if (method == read) return Access::kRead;
  }
  return Access::kTrain;
}

std::shared_ptr<grpc::AuthMetadataProcessor> NewTokenProcessor(
    std::string train_token, std::string read_token) {
  return std::make_shared<TokenProcessor>(std::move(train_token),
                                          std::move(read_token));
}

}  // namespace embedps::security
