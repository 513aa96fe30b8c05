// RoleRefusal: what a ps_server answers to a method its role does not
// serve — a training call sent to a serving replica, a Pull sent to the
// coordinator — instead of gRPC's bare UNIMPLEMENTED: FAILED_PRECONDITION
// naming the method, what this process is, and where such calls belong.
// Registered as the server's generic service, it sees only the calls no
// registered service takes.
//
// Thread safety: thread-safe (constant after construction).
#ifndef EMBEDPS_SERVER_ROLE_REFUSAL_H_
#define EMBEDPS_SERVER_ROLE_REFUSAL_H_

#include <string>

#include "grpcpp/generic/async_generic_service.h"

namespace embedps::server {

class RoleRefusal final : public grpc::CallbackGenericService {
 public:
  // `role`: what this process is and what it serves, e.g. "a serving
  // replica (read-only: it follows training's checkpoints and
  // publications; it serves ServingService and StatsService)"; `advice`:
  // where the refused calls belong.
  RoleRefusal(std::string role, std::string advice);

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override;

 private:
  const std::string role_;
  const std::string advice_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_ROLE_REFUSAL_H_
