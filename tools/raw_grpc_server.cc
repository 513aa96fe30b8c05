// raw_grpc_server: a gRPC server that only moves bytes, for ps_bench's
// ceilings. Same server options as ps_server (message size), no table work:
// it answers each Call and CallBulk with `response_bytes` zero bytes.
//
//   raw_grpc_server --port=0 --port_file=/tmp/raw.port
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/malloc_options.h"
#include "grpcpp/grpcpp.h"
#include "tools/raw_bench.grpc.pb.h"
#include "wire/bulk_message.h"
#include "wire/grpc_status.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "address to listen on");
ABSL_FLAG(int32_t, port, 0, "port; 0 picks a free one");
ABSL_FLAG(std::string, port_file, "", "where to write the chosen port");
ABSL_FLAG(size_t, max_response_bytes, 64 << 20,
          "largest response CallBulk answers (a buffer of zeros this big)");
ABSL_FLAG(std::string, log_level, "",
          "accepted for symmetry with ps_server; unused");

namespace {

using embedps::tools::RawBench;
using embedps::tools::RawRequest;
using embedps::tools::RawResponse;

class RawBenchService final
    : public RawBench::WithRawCallbackMethod_CallBulk<RawBench::Service> {
 public:
  grpc::Status Call(grpc::ServerContext*, const RawRequest* request,
                    RawResponse* response) override {
    response->mutable_payload()->resize(request->response_bytes());
    return grpc::Status::OK;
  }

  grpc::ServerUnaryReactor* CallBulk(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* request,
                                     grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    RawRequest header;
    const absl::StatusOr<std::vector<embedps::wire::BulkBytes>> payload =
        embedps::wire::ParseBulkMessage(
            *request, {RawRequest::kPayloadFieldNumber}, &header);
    if (!payload.ok()) {
      reactor->Finish(embedps::wire::ToGrpcStatus(payload.status()));
      return reactor;
    }
    const size_t bytes = header.response_bytes();
    if (zeros_.size() < bytes) {
      reactor->Finish(grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                                   "response_bytes over --max_response_bytes"));
      return reactor;
    }
    std::vector<embedps::wire::BulkField> fields;
    fields.push_back(
        {RawResponse::kPayloadFieldNumber,
         grpc::Slice(zeros_.data(), bytes, grpc::Slice::STATIC_SLICE)});
    *response =
        embedps::wire::SerializeBulkMessage(RawResponse(), std::move(fields));
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const std::string zeros_ =
      std::string(absl::GetFlag(FLAGS_max_response_bytes), '\0');
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  RawBenchService service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port)),
      grpc::InsecureServerCredentials(), &port);
  builder.SetMaxReceiveMessageSize(1 << 30);
  builder.SetMaxSendMessageSize(1 << 30);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "raw_grpc_server: cannot listen\n");
    return 1;
  }
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    std::ofstream(path + ".tmp") << port << "\n-1\n";
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
  });
  server->Wait();
  stopper.join();
  return 0;
}
