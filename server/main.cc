// ps_server: one shard of the embedps parameter server.
//
//   ps_server --port=50051 --shard_index=0 --num_shards=2 --tables=tables.txtpb
//
// Serves EmbeddingService, gRPC health checking and server reflection
// (grpcurl can list and call everything). SIGTERM or SIGINT: stop taking
// calls, finish those in flight (up to --shutdown_grace), exit 0.
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "httplib.h"
#include "server/checkpointer.h"
#include "server/coordination_service.h"
#include "server/embedding_service.h"
#include "server/rpc_metrics.h"
#include "server/table_config.h"
#include "server/table_registry.h"

ABSL_FLAG(std::string, host, "0.0.0.0",
          "address to listen on (127.0.0.1 for loopback only)");
ABSL_FLAG(int32_t, port, 50051,
          "port to listen on; 0 picks a free one (printed, and written to "
          "--port_file)");
ABSL_FLAG(std::string, port_file, "",
          "if set, the chosen port is written here once the server listens "
          "(for scripts and tests that start servers with --port=0)");
ABSL_FLAG(int32_t, shard_index, 0, "this server's shard, in [0, num_shards)");
ABSL_FLAG(int32_t, num_shards, 1,
          "number of shards; a key belongs to shard "
          "JumpConsistentHash(Mix64(key), num_shards)");
ABSL_FLAG(int32_t, num_workers, 1,
          "number of training workers (used by the synchronous modes)");
ABSL_FLAG(int32_t, metrics_port, -1,
          "port of the Prometheus /metrics page (HTTP); 0 picks a free one "
          "(printed, and written to --port_file's second line); -1: off");
ABSL_FLAG(std::string, tables, "",
          "text-format embedps.proto.TableConfigList of tables to create at "
          "start (tables can also be created over RPC)");
ABSL_FLAG(std::string, data_dir, "",
          "this shard's local disk directory: tables with a memory budget "
          "(memory_budget_bytes) keep rows beyond it in RocksDB under "
          "DATA_DIR/shard-I-of-N/spill (emptied at start: the spill tier is a "
          "cache, checkpoints are the durable copy); empty: budgets are only "
          "reported");
ABSL_FLAG(int64_t, spill_block_cache_mb, 64,
          "RocksDB block cache of each table's spill tier, MiB");
ABSL_FLAG(bool, spill_read_around, false,
          "let the kernel read around each miss in the spill tier's files "
          "(the disk's read_ahead_kb) instead of the one page it needs: for "
          "spill tiers that fit in the page cache, which it then fills in "
          "large reads; wasteful where they do not fit");
ABSL_FLAG(std::string, restore, "",
          "checkpoint to restore before serving: a checkpoint directory "
          "(ROOT/ckpt-...), or ROOT to take the latest complete one; it may "
          "have been written by any number of shards");
ABSL_FLAG(uint64_t, max_keys_per_request, uint64_t{4} << 20,
          "most keys one Pull or Push may carry (RESOURCE_EXHAUSTED above)");
ABSL_FLAG(int32_t, max_message_bytes, 1 << 30,
          "largest gRPC message accepted or sent, in bytes");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "on SIGTERM, how long in-flight calls may take to finish");
ABSL_FLAG(double, TEST_drop_push_response_probability, 0.0,
          "test only: answer UNAVAILABLE to this fraction of applied pushes, "
          "as if the response were lost");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");

namespace embedps::server {
namespace {

absl::Status LoadTables(const std::string& path, TableRegistry& registry) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot read --tables file '", path, "'"));
  }
  std::stringstream text;
  text << file.rdbuf();
  proto::TableConfigList list;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &list)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tables file '", path,
        "' is not a text-format embedps.proto.TableConfigList (the parse "
        "error is logged above)"));
  }
  for (const proto::TableConfig& config : list.table()) {
    absl::StatusOr<TableRegistry::CreateResult> created =
        registry.Create(config);
    if (!created.ok()) {
      return absl::Status(
          created.status().code(),
          absl::StrCat("--tables file '", path, "', table '", config.name(),
                       "': ", created.status().message()));
    }
  }
  return absl::OkStatus();
}

int Run() {
  const auto log = Logger("server");
  if (absl::Status s = SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    log->error("{}", s.message());
    return 2;
  }
  ShardOptions options;
  options.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.max_keys_per_request = absl::GetFlag(FLAGS_max_keys_per_request);
  options.TEST_drop_push_response_probability =
      absl::GetFlag(FLAGS_TEST_drop_push_response_probability);
  if (options.num_shards < 1 || options.shard_index < 0 ||
      options.shard_index >= options.num_shards) {
    log->error("--shard_index={} must be in [0, --num_shards={})",
               options.shard_index, options.num_shards);
    return 2;
  }

  if (absl::GetFlag(FLAGS_num_workers) < 1) {
    log->error("--num_workers must be at least 1");
    return 2;
  }
  std::string spill_root;
  if (const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
      !data_dir.empty()) {
    spill_root = absl::StrCat(
        data_dir, "/",
        checkpoint::ShardDirectoryName(options.shard_index, options.num_shards),
        "/spill");
  }
  if (absl::GetFlag(FLAGS_spill_block_cache_mb) < 1) {
    log->error("--spill_block_cache_mb must be at least 1");
    return 2;
  }
  TableRegistry registry(
      absl::GetFlag(FLAGS_num_workers), spill_root,
      static_cast<uint64_t>(absl::GetFlag(FLAGS_spill_block_cache_mb)) << 20,
      absl::GetFlag(FLAGS_spill_read_around));
  if (const std::string path = absl::GetFlag(FLAGS_tables); !path.empty()) {
    if (absl::Status s = LoadTables(path, registry); !s.ok()) {
      log->error("{}", s.message());
      return 2;
    }
  }

  ShardCheckpointer checkpointer(options.shard_index, options.num_shards,
                                 &registry);
  if (const std::string path = absl::GetFlag(FLAGS_restore); !path.empty()) {
    const absl::Time start = absl::Now();
    absl::StatusOr<proto::LoadResponse> restored = checkpointer.Restore(path);
    if (!restored.ok()) {
      log->error("--restore={}: {}", path, restored.status().ToString());
      return 1;
    }
    log->info("restored checkpoint '{}' (step {}, {} rows) in {:.2f} s",
              restored->name(), restored->step(), restored->rows(),
              absl::ToDoubleSeconds(absl::Now() - start));
  }

  // Signals are taken by one thread with sigwait, so no handler runs in an
  // arbitrary gRPC thread. Block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  RpcMetrics metrics;
  EmbeddingServiceImpl service(options, &registry, &checkpointer, &metrics);
  // Every shard answers Coordination; by convention workers use shard 0's.
  CoordinationServiceImpl coordination(&metrics);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound_port = 0;
  const std::string address =
      absl::StrCat(absl::GetFlag(FLAGS_host), ":", absl::GetFlag(FLAGS_port));
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(),
                           &bound_port);
  builder.SetMaxReceiveMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.SetMaxSendMessageSize(absl::GetFlag(FLAGS_max_message_bytes));
  builder.RegisterService(&service);
  builder.RegisterService(&coordination);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound_port == 0) {
    log->error("cannot listen on {} (in use, or not an address of this host)",
               address);
    return 1;
  }
  log->info("shard {} of {} listening on port {} with {} table(s)",
            options.shard_index, options.num_shards, bound_port,
            registry.List().size());
  // Prometheus text on /metrics, rendered from the same numbers as Stats.
  httplib::Server metrics_http;
  std::thread metrics_thread;
  int metrics_port = -1;
  if (absl::GetFlag(FLAGS_metrics_port) >= 0) {
    metrics_http.Get("/metrics",
                     [&](const httplib::Request&, httplib::Response& res) {
                       res.set_content(RenderPrometheus(service.CollectStats()),
                                       "text/plain; version=0.0.4");
                     });
    const std::string host = absl::GetFlag(FLAGS_host);
    metrics_port = absl::GetFlag(FLAGS_metrics_port) == 0
                       ? metrics_http.bind_to_any_port(host)
                       : (metrics_http.bind_to_port(
                              host, absl::GetFlag(FLAGS_metrics_port))
                              ? absl::GetFlag(FLAGS_metrics_port)
                              : -1);
    if (metrics_port < 0) {
      log->error("cannot listen for metrics on {}:{}", host,
                 absl::GetFlag(FLAGS_metrics_port));
      server->Shutdown();
      return 1;
    }
    metrics_thread = std::thread([&] { metrics_http.listen_after_bind(); });
    log->info("metrics on http://{}:{}/metrics", host, metrics_port);
  }
  std::printf("port %d\n", bound_port);
  if (metrics_port >= 0) std::printf("metrics_port %d\n", metrics_port);
  std::fflush(stdout);
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    // Write then rename, so a reader never sees a half-written file.
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << bound_port << "\n" << metrics_port << "\n";
    std::rename(tmp.c_str(), path.c_str());
  }

  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    log->info("signal {}: finishing in-flight calls, then exiting", signal);
    server->Shutdown(
        std::chrono::system_clock::now() +
        absl::ToChronoSeconds(absl::GetFlag(FLAGS_shutdown_grace)));
  });
  server->Wait();
  stopper.join();
  if (metrics_thread.joinable()) {
    metrics_http.stop();
    metrics_thread.join();
  }
  log->info("stopped");
  return 0;
}

}  // namespace
}  // namespace embedps::server

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "One shard of the embedps parameter server.\n"
      "  ps_server --port=50051 --shard_index=0 --num_shards=2 "
      "--tables=tables.txtpb");
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();
  return embedps::server::Run();
}
