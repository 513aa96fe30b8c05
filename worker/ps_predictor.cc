// ps_predictor: serves click probabilities (the Predictor service) for
// raw feature lines (Criteo's, or a schema job's columns without the
// label), from the serving replicas' embeddings and the dense model of the
// same training step (worker/predictor.h).
//
//   ps_predictor --config=dlrm.txtpb --serving=h1:p,h2:p;h3:p,h4:p --port=0
//
// --serving lists every serving shard's replicas: shards separated by ';',
// a shard's replicas by ','.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/connection_cap.h"
#include "common/logging.h"
#include "common/program_usage.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "common/work_queue.h"
#include "dense/blas.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "proto/serving.grpc.pb.h"
#include "security/flags.h"
#include "security/health_service.h"
#include "wire/grpc_status.h"
#include "wire/host_port.h"
#include "worker/predictor.h"

ABSL_FLAG(
    std::string, config, "",
    "the training job's config::WorkerConfig (its tables, slots and model)");
ABSL_FLAG(std::string, serving, "",
          "every serving shard's replicas: shards separated by ';', a "
          "shard's replicas by ',' (host:port each)");
ABSL_FLAG(std::string, cluster_id, "",
          "the cluster every serving replica must state it belongs to "
          "(their --cluster_id); empty: the one the first to answer states");
ABSL_FLAG(std::string, train_data, "",
          "the training files (comma-separated), read only for a schema "
          "job whose model records no input layout (a header row or "
          "STANDARDIZE columns are then read as the training read them); "
          "default: the config's train_files");
ABSL_FLAG(std::string, host, "127.0.0.1", "address to listen on");
ABSL_FLAG(int32_t, port, 0, "port; 0 picks one (printed, and --port_file)");
ABSL_FLAG(std::string, port_file, "", "where the chosen port is written");
ABSL_FLAG(int32_t, deadline_ms, 100, "a prediction's lookups give up after");
ABSL_FLAG(int64_t, cache_rows, 0, "rows of the hot-key cache (0: none)");
ABSL_FLAG(absl::Duration, cache_ttl, absl::Seconds(1),
          "how long a cached row may be used");
ABSL_FLAG(int32_t, blas_threads, 1,
          "threads one prediction's batch is split over (predictions run "
          "in parallel on the server's threads)");
ABSL_FLAG(
    int32_t, predict_threads,
    static_cast<int32_t>(std::max(4u, 2 * std::thread::hardware_concurrency())),
    "threads that run predictions (each blocks on its lookups, then "
    "runs the model); default: twice the cores, at least 4");
ABSL_FLAG(int64_t, max_waiting_predictions, 1024,
          "predictions that may wait for a thread; more are refused with "
          "RESOURCE_EXHAUSTED (bounded memory under overload)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");

namespace embedps::worker {
namespace {

// Predict on gRPC's callback API, the work on threads of our own (a
// prediction blocks on its lookups). With synchronous handlers blocked on
// those lookups the process read its connections up to ~100 ms late
// (docs/architecture.md "Predict"): serve_bench's Predict p99 was 87 ms
// against a p50 of 0.6 ms.
class PredictorService final : public proto::Predictor::CallbackService {
 public:
  PredictorService(Predictor* predictor, WorkQueue* work)
      : predictor_(predictor), work_(work) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const proto::PredictRequest* request,
                                    proto::PredictResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    // The request and the response live until Finish.
    const bool queued = work_->TrySubmit([this, reactor, request, response] {
      reactor->Finish(Run(*request, response));
    });
    if (!queued) {
      reactor->Finish(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat(work_->max_waiting(),
                       " predictions wait for a thread already "
                       "(--max_waiting_predictions): retry later")));
    }
    return reactor;
  }

 private:
  grpc::Status Run(const proto::PredictRequest& request,
                   proto::PredictResponse* response) {
    uint64_t version = 0;
    std::vector<std::string> lines(request.line().begin(),
                                   request.line().end());
    absl::StatusOr<std::vector<float>> p =
        predictor_->PredictLines(lines, &version);
    if (!p.ok()) {
      return wire::ToGrpcStatus(p.status());
    }
    response->mutable_probability()->Add(p->begin(), p->end());
    response->set_version(version);
    return grpc::Status::OK;
  }

  Predictor* const predictor_;
  WorkQueue* const work_;
};

absl::StatusOr<PredictorOptions> OptionsFromFlags() {
  PredictorOptions options;
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) {
    return absl::InvalidArgumentError(
        "--config=FILE (a config::WorkerConfig) is required");
  }
  RETURN_IF_ERROR(ReadTextProtoFile(path, absl::StrCat("--config ", path),
                                    &options.config));
  if (!absl::GetFlag(FLAGS_train_data).empty()) {
    options.config.clear_train_files();
    for (absl::string_view file : absl::StrSplit(
             absl::GetFlag(FLAGS_train_data), ',', absl::SkipEmpty())) {
      options.config.add_train_files(std::string(file));
    }
  }
  for (absl::string_view shard :
       absl::StrSplit(absl::GetFlag(FLAGS_serving), ';', absl::SkipEmpty())) {
    options.serving.replicas.emplace_back();
    for (absl::string_view replica :
         absl::StrSplit(shard, ',', absl::SkipEmpty())) {
      options.serving.replicas.back().emplace_back(replica);
    }
  }
  options.serving.cluster_id = absl::GetFlag(FLAGS_cluster_id);
  if (options.serving.replicas.empty()) {
    return absl::InvalidArgumentError(
        "--serving=HOST:PORT[,...][;...] is required: every serving shard's "
        "replicas");
  }
  options.serving.deadline =
      absl::Milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  options.serving.attempt_timeout = options.serving.deadline / 2;
  options.serving.cache_rows = absl::GetFlag(FLAGS_cache_rows);
  options.serving.cache_ttl = absl::GetFlag(FLAGS_cache_ttl);
  options.serving.security = security::ChannelSecurityFromFlags();
  return options;
}

int Run() {
  const auto log = Logger("predictor");
  absl::StatusOr<PredictorOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    log->error("{}", options.status().ToString());
    return 2;
  }
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  RaiseServerDescriptorLimit();
  dense::SetDenseThreads(std::max(1, absl::GetFlag(FLAGS_blas_threads)));
  absl::StatusOr<std::unique_ptr<Predictor>> predictor =
      Predictor::Start(*std::move(options));
  if (!predictor.ok()) {
    log->error("{}", predictor.status().ToString());
    return 1;
  }
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      security::MakeServerCredentials(security::ServerSecurityFromFlags());
  if (!credentials.ok()) {
    log->error("{}", credentials.status().ToString());
    return 2;
  }
  const int threads = absl::GetFlag(FLAGS_predict_threads);
  const int64_t max_waiting = absl::GetFlag(FLAGS_max_waiting_predictions);
  if (threads < 1 || threads > 1024 || max_waiting < 1) {
    log->error(
        "--predict_threads must be in [1, 1024] and "
        "--max_waiting_predictions >= 1 (given {} and {})",
        threads, max_waiting);
    return 2;
  }
  // Outlives the server: its Shutdown waits for the predictions queued.
  WorkQueue work(threads, static_cast<size_t>(max_waiting));
  PredictorService service(predictor->get(), &work);
  // Our own health service: its Watch streams are bounded.
  grpc::EnableDefaultHealthCheckService(false);
  security::HealthService health;
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address =
      wire::HostPort(absl::GetFlag(FLAGS_host), absl::GetFlag(FLAGS_port));
  builder.AddListeningPort(address, *credentials, &port);
  // gRPC binds with SO_REUSEPORT by default: a second server on a port in
  // use would start and silently take half of its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  builder.RegisterService(&health);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    log->error("cannot listen on {}", address);
    return 1;
  }
  log->info("predicting with the dense model of step {} on port {}",
            (*predictor)->step(), port);
  std::printf("port %d\n", port);
  std::fflush(stdout);
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << port << "\n-1\n";  // no metrics port
    std::rename(tmp.c_str(), path.c_str());
  }
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    health.Shutdown();
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
  });
  server->Wait();
  stopper.join();
  return 0;
}

}  // namespace
}  // namespace embedps::worker

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "serves click probabilities for raw Criteo features from the serving "
      "replicas' embeddings and the dense model of the same step.\n"
      "  ps_predictor --config=dlrm.txtpb --serving=H:P,H:P;H:P,H:P",
      {"worker/ps_predictor.cc", embedps::security::kClientFlagsFile,
       embedps::security::kServerFlagsFile});
  absl::ParseCommandLine(argc, argv);
  if (absl::Status s = embedps::SetLogLevel(absl::GetFlag(FLAGS_log_level));
      !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  return embedps::worker::Run();
}
