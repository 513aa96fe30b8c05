#include "server/shard.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "httplib.h"
#include "server/checkpointer.h"
#include "server/coordination_service.h"
#include "server/rpc_metrics.h"
#include "server/serving_service.h"
#include "server/table_registry.h"

namespace embedps::server {

namespace {

TableRegistry::Options RegistryOptionsFor(const ShardOptions& o) {
  TableRegistry::Options options;
  options.num_workers = o.num_workers;
  options.spill_root = o.spill_root;
  options.spill_block_cache_bytes = o.spill_block_cache_bytes;
  options.spill_read_around = o.spill_read_around;
  options.num_shards = o.service.num_shards;
  options.max_expected_rows_bytes = o.max_expected_rows_bytes;
  return options;
}

}  // namespace

// Members are destroyed in reverse order: the servers stop before the
// services and tables they call go.
struct Shard::Parts {
  explicit Parts(const ShardOptions& o)
      : options(o),
        registry(RegistryOptionsFor(o)),
        memory(o.service.memory_limit_bytes),
        checkpointer(o.service.shard_index, o.service.num_shards, &registry,
                     o.checkpoint_root, &memory),
        publisher(PublisherFor(o), &registry),
        service(ServiceFor(o), &registry, &checkpointer, &metrics, &memory,
                o.serving ? nullptr : &publisher),
        coordination(&metrics, o.coordination) {}

  static PublisherOptions PublisherFor(const ShardOptions& o) {
    PublisherOptions p = o.publisher;
    p.shard_index = o.service.shard_index;
    p.num_shards = o.service.num_shards;
    return p;
  }
  static ServiceOptions ServiceFor(const ShardOptions& o) {
    ServiceOptions s = o.service;
    s.serving_replica = o.serving;
    return s;
  }

  const ShardOptions options;
  TableRegistry registry;
  // The process's memory limit, for every path that may allocate.
  MemoryGuard memory;
  ShardCheckpointer checkpointer;
  RpcMetrics metrics;
  Publisher publisher;
  EmbeddingServiceImpl service;
  // A serving replica's.
  std::unique_ptr<Follower> follower;
  std::unique_ptr<ServingServiceImpl> serving;
  // Every shard answers Coordination; by convention workers use shard 0's.
  CoordinationServiceImpl coordination;
  proto::LoadResponse restored;
  // Replication: the directory (a coordinator), or this replica's part.
  std::unique_ptr<ReplicaDirectory> directory;
  std::unique_ptr<ReplicaDirectoryServiceImpl> directory_service;
  std::unique_ptr<Replicator> replicator;
  std::unique_ptr<ReplicationServiceImpl> replication;

  std::unique_ptr<grpc::Server> server;
  int port = 0;
  httplib::Server metrics_http;
  std::thread metrics_thread;
  int metrics_port = -1;

  Mutex shutdown_mu;
  bool shut_down = false;
};

namespace {

absl::Status CheckOptions(const ShardOptions& o) {
  if (o.service.num_shards < 1 || o.service.shard_index < 0 ||
      o.service.shard_index >= o.service.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_index ", o.service.shard_index,
                     " must be in [0, num_shards ", o.service.num_shards, ")"));
  }
  if (o.num_workers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be at least 1, not ", o.num_workers));
  }
  if (o.spill_block_cache_bytes == 0) {
    return absl::InvalidArgumentError("spill_block_cache_bytes must be > 0");
  }
  if (o.port < 0 || o.port > 65535 || o.metrics_port < -1 ||
      o.metrics_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ports must be in [0, 65535] (metrics_port -1: none); got port ",
        o.port, ", metrics_port ", o.metrics_port));
  }
  if (o.max_message_bytes < 1) {
    return absl::InvalidArgumentError("max_message_bytes must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Shard>> Shard::Start(ShardOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   security::MakeServerCredentials(options.security));
  auto parts = std::make_unique<Parts>(options);
  for (const proto::TableConfig& config : options.tables.table()) {
    absl::StatusOr<TableRegistry::CreateResult> created =
        parts->registry.Create(config);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("table '", config.name(),
                                       "': ", created.status().message()));
    }
  }
  if (!options.restore.empty()) {
    ASSIGN_OR_RETURN(parts->restored,
                     parts->checkpointer.Restore(options.restore));
    parts->service.set_restored_step(parts->restored.step());
  }
  if (options.serving) {
    ASSIGN_OR_RETURN(parts->follower, Follower::Start(options.follow));
    ServingServiceOptions serving;
    serving.shard_index = options.follow.shard_index;
    serving.num_shards = options.follow.num_shards;
    serving.max_keys_per_request = options.max_lookup_keys;
    serving.max_response_bytes = options.service.max_response_bytes;
    parts->serving = std::make_unique<ServingServiceImpl>(
        serving, parts->follower.get(), &parts->metrics);
    Follower* follower = parts->follower.get();
    parts->service.set_stats_source([follower](proto::StatsResponse* stats) {
      stats->set_serving_replica(true);
      *stats->mutable_serving() = follower->Describe();
      // The tables are the served base's.
      const std::shared_ptr<const ServingVersion> version = follower->Current();
      for (const TableRegistry::Entry& entry : version->registry->List()) {
        proto::TableStatsProto* out = stats->add_table();
        out->set_table_id(entry.table_id);
        out->set_name(entry.config->name());
        TableStatsToProto(entry.table->Stats(), out);
      }
    });
  }

  if (options.replica_directory) {
    parts->directory = std::make_unique<ReplicaDirectory>(options.directory);
    parts->directory_service = std::make_unique<ReplicaDirectoryServiceImpl>(
        parts->directory.get(), &parts->metrics);
  }
  if (!options.replication.directory.empty()) {
    if (options.serving) {
      return absl::InvalidArgumentError(
          "a serving replica cannot be a replicated training shard");
    }
    ReplicationOptions replication = options.replication;
    replication.shard = options.service.shard_index;
    EmbeddingServiceImpl* service = &parts->service;
    ASSIGN_OR_RETURN(parts->replicator,
                     Replicator::Create(
                         replication, &parts->registry, service->deduplicator(),
                         &parts->checkpointer, &parts->metrics, &parts->memory,
                         [service](const proto::ReplicatedOp& op) {
                           return service->ApplyForwarded(op);
                         }));
    service->set_replicator(parts->replicator.get());
    parts->replication = std::make_unique<ReplicationServiceImpl>(
        parts->replicator.get(), &parts->metrics);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const std::string address = absl::StrCat(options.host, ":", options.port);
  builder.AddListeningPort(address, credentials, &parts->port);
  // gRPC binds with SO_REUSEPORT by default: a second server on a port in
  // use would start and silently take half of its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  builder.RegisterService(&parts->service);
  builder.RegisterService(&parts->coordination);
  if (parts->serving != nullptr) builder.RegisterService(parts->serving.get());
  if (parts->directory_service != nullptr) {
    builder.RegisterService(parts->directory_service.get());
  }
  if (parts->replication != nullptr) {
    builder.RegisterService(parts->replication.get());
  }
  parts->server = builder.BuildAndStart();
  if (parts->server == nullptr || parts->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     " (in use, or not an address of this host)"));
  }
  if (options.metrics_port >= 0) {
    // Prometheus text, rendered from the same numbers as Stats.
    Parts* p = parts.get();
    p->metrics_http.Get(
        "/metrics", [p](const httplib::Request&, httplib::Response& res) {
          res.set_content(RenderPrometheus(p->service.CollectStats()),
                          "text/plain; version=0.0.4");
        });
    const std::string& metrics_host =
        options.metrics_host.empty() ? options.host : options.metrics_host;
    p->metrics_port =
        options.metrics_port == 0
            ? p->metrics_http.bind_to_any_port(metrics_host)
            : (p->metrics_http.bind_to_port(metrics_host, options.metrics_port)
                   ? options.metrics_port
                   : -1);
    if (p->metrics_port < 0) {
      p->server->Shutdown();
      return absl::UnavailableError(
          absl::StrCat("cannot listen for metrics on ", metrics_host, ":",
                       options.metrics_port));
    }
    p->metrics_thread =
        std::thread([p] { p->metrics_http.listen_after_bind(); });
  }
  if (parts->replicator != nullptr) {
    parts->replicator->Run(options.replication.member.empty()
                               ? absl::StrCat(options.host, ":", parts->port)
                               : options.replication.member);
  }
  return std::unique_ptr<Shard>(new Shard(std::move(parts)));
}

Replicator* Shard::replicator() { return parts_->replicator.get(); }

Shard::Shard(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

Shard::~Shard() {
  Shutdown();
  Wait();
}

int Shard::port() const { return parts_->port; }
std::string Shard::address() const {
  return absl::StrCat(parts_->options.host, ":", parts_->port);
}
int Shard::metrics_port() const { return parts_->metrics_port; }
const proto::LoadResponse& Shard::restored() const { return parts_->restored; }
int Shard::num_tables() const {
  return static_cast<int>(parts_->registry.List().size());
}

void Shard::Shutdown(absl::Duration grace) {
  {
    MutexLock lock(&parts_->shutdown_mu);
    if (parts_->shut_down) return;
    parts_->shut_down = true;
  }
  // Subscribers' streams end at once rather than at the grace's end.
  parts_->publisher.Close();
  parts_->server->Shutdown(std::chrono::system_clock::now() +
                           absl::ToChronoMilliseconds(grace));
  if (parts_->metrics_port >= 0) parts_->metrics_http.stop();
}

void Shard::Wait() {
  parts_->server->Wait();
  MutexLock lock(&parts_->shutdown_mu);
  if (parts_->metrics_thread.joinable()) parts_->metrics_thread.join();
}

proto::StatsResponse Shard::CollectStats() {
  return parts_->service.CollectStats();
}

}  // namespace embedps::server
