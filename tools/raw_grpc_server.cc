// raw_grpc_server: a gRPC server that only moves bytes, for ps_bench's
// ceiling. Same server options as ps_server (message size), no table work:
// it answers each Call with `response_bytes` zero bytes.
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
#include "grpcpp/grpcpp.h"
#include "tools/raw_bench.grpc.pb.h"

ABSL_FLAG(std::string, host, "127.0.0.1", "address to listen on");
ABSL_FLAG(int32_t, port, 0, "port; 0 picks a free one");
ABSL_FLAG(std::string, port_file, "", "where to write the chosen port");
ABSL_FLAG(std::string, log_level, "",
          "accepted for symmetry with ps_server; unused");

namespace {

class RawBenchService final : public embedps::tools::RawBench::Service {
  grpc::Status Call(grpc::ServerContext*,
                    const embedps::tools::RawRequest* request,
                    embedps::tools::RawResponse* response) override {
    response->mutable_payload()->resize(request->response_bytes());
    return grpc::Status::OK;
  }
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
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
