// _embedps: the C++ part of the embedps Python package (embedps/*.py wraps
// it). No libtorch: arrays cross as numpy arrays.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <pybind11/pybind11.h>

#include <condition_variable>
#include <memory>
#include <mutex>

#include "python/src/bindings.h"

namespace embedps::python {
namespace {

// gRPC 1.51 (Debian 12) runs the C++ callback API on a shared completion
// queue whose threads it starts with the first channel that makes a
// callback call and stops when the last such channel goes. A Python
// program drops clients freely, and the last reference to a channel is
// then often released by a finishing call on one of those very threads:
// the queue is stopped from its own thread and gRPC aborts
// (grpc_cq_internal_unref: "prior > 0"). A channel that made one callback
// call and lives as long as the process keeps the queue running. Its call
// goes to a Unix socket that does not exist: it fails at once, sending
// nothing anywhere.
void KeepCallbackQueue() {
  auto* channel = new std::shared_ptr<grpc::Channel>(
      grpc::CreateChannel("unix:/nonexistent/embedps-keep-callback-queue",
                          grpc::InsecureChannelCredentials()));
  grpc::GenericStub stub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  stub.UnaryCall(&context, "/embedps.KeepCallbackQueue/None", {}, &request,
                 &response, [&](grpc::Status) {
                   std::lock_guard<std::mutex> lock(mu);
                   done = true;
                   done_cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  done_cv.wait(lock, [&] { return done; });
}

}  // namespace
}  // namespace embedps::python

PYBIND11_MODULE(_embedps, m) {
  m.doc() = "embedps: the client of embedps parameter servers (C++ core)";
  embedps::python::KeepCallbackQueue();
  embedps::python::BindClient(m);
  embedps::python::BindHotRows(m);
  embedps::python::BindServing(m);
  embedps::python::BindData(m);
}
