#include "server/role_refusal.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace embedps::server {
namespace {

// A method's path is the client's: quoted short, whatever it sent.
constexpr size_t kMaxQuotedMethod = 200;

class Refusal final : public grpc::ServerGenericBidiReactor {
 public:
  explicit Refusal(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

RoleRefusal::RoleRefusal(std::string role, std::string advice)
    : role_(std::move(role)), advice_(std::move(advice)) {}

grpc::ServerGenericBidiReactor* RoleRefusal::CreateReactor(
    grpc::GenericCallbackServerContext* context) {
  // "/embedps.proto.TrainingService/Push" -> "TrainingService.Push".
  absl::string_view method = absl::StripPrefix(
      absl::StripPrefix(context->method(), "/"), "embedps.proto.");
  std::string name =
      absl::StrReplaceAll(method.substr(0, kMaxQuotedMethod), {{"/", "."}});
  if (method.size() > kMaxQuotedMethod) absl::StrAppend(&name, "...");
  return new Refusal(grpc::Status(
      grpc::StatusCode::FAILED_PRECONDITION,
      absl::StrCat(name, " refused: this is ", role_, ". ", advice_)));
}

}  // namespace embedps::server
