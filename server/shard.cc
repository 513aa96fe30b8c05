#include "server/shard.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/metrics_http.h"
#include "common/status_macros.h"
#include "control/etcd_client.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "httplib.h"
#include "security/health_service.h"
#include "server/checkpointer.h"
#include "server/coordination_service.h"
#include "server/etcd_directory_client.h"
#include "server/expiry_sweeper.h"
#include "server/role_refusal.h"
#include "server/rpc_metrics.h"
#include "server/serving_service.h"
#include "server/stats_service.h"
#include "server/table_registry.h"
#include "server/write_order.h"
#include "wire/host_port.h"
#include "wire/keepalive.h"

namespace embedps::server {

// What a training shard is made of.
struct TrainingParts {
  // `memory`: the process's guard (Shard::Parts), outliving these parts.
  TrainingParts(const ShardOptions& o, RpcMetrics* metrics, MemoryGuard* memory)
      : registry(RegistryOptionsFor(o)),
        memory(memory),
        checkpointer(o.service.shard_index, o.service.num_shards, &registry,
                     o.checkpoint_root, memory, o.keep_checkpoints),
        publisher(PublisherFor(o), &registry),
        coordination(metrics, o.coordination),
        sweeper(&registry, o.ttl_sweep_interval) {}

  static TableRegistry::Options RegistryOptionsFor(const ShardOptions& o) {
    TableRegistry::Options options;
    options.num_workers = o.num_workers;
    options.sync_apply_threads = o.sync_apply_threads;
    options.spill_root = o.spill_root;
    options.spill_block_cache_bytes = o.spill_block_cache_bytes;
    options.spill_read_around = o.spill_read_around;
    options.num_shards = o.service.num_shards;
    options.max_expected_rows_bytes = o.max_expected_rows_bytes;
    return options;
  }
  static PublisherOptions PublisherFor(const ShardOptions& o) {
    PublisherOptions p = o.publisher;
    p.shard_index = o.service.shard_index;
    p.num_shards = o.service.num_shards;
    return p;
  }

  TableRegistry registry;
  // The process's memory limit, for every path that may allocate.
  MemoryGuard* const memory;
  ShardCheckpointer checkpointer;
  Publisher publisher;
  PushDeduplicator deduplicator;
  // Every training shard answers Coordination; by convention workers use
  // shard 0's.
  CoordinationServiceImpl coordination;
  // TTL eviction that runs (destroyed before the registry it sweeps).
  ExpirySweeper sweeper;
  proto::LoadResponse restored;
  // How writes are ordered: at once, or a replicated shard's Replicator.
  std::unique_ptr<WriteOrder> unreplicated;
  std::unique_ptr<Replicator> replicator;
  std::unique_ptr<ReplicationServiceImpl> replication;
  std::unique_ptr<TrainingServiceImpl> service;
};

// What a serving replica is made of.
struct ServingParts {
  std::unique_ptr<Follower> follower;
  std::unique_ptr<ServingServiceImpl> service;
};

// What a coordinator is made of: the directory, and the rendezvous store
// of a cluster whose shards are replicated (no single shard process lasts).
struct CoordinatorParts {
  CoordinatorParts(const ShardOptions& o, RpcMetrics* metrics)
      : directory(o.directory),
        service(&directory, metrics),
        coordination(metrics, o.coordination) {}

  ReplicaDirectory directory;
  ReplicaDirectoryServiceImpl service;
  CoordinationServiceImpl coordination;
};

// Members are destroyed in reverse order: the servers stop before the
// services and tables they call go.
struct Shard::Parts {
  explicit Parts(ShardOptions o)
      : options(std::move(o)), memory(options.service.memory_limit_bytes) {}

  const ShardOptions options;
  RpcMetrics metrics;
  // The process's memory (limit and resident bytes), whatever its role:
  // a training shard admits allocating calls against it; every role's
  // Stats reports it.
  MemoryGuard memory;
  // One of the three, by options.role.
  std::unique_ptr<TrainingParts> training;
  std::unique_ptr<ServingParts> serving;
  std::unique_ptr<CoordinatorParts> coordinator;
  std::unique_ptr<StatsServiceImpl> stats;
  // Answers what the role does not serve.
  std::unique_ptr<RoleRefusal> refusal;
  // grpc.health.v1.Health, with its Watch streams bounded.
  security::HealthService health;

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
  if (o.cluster_id.size() > 128 ||
      !std::all_of(o.cluster_id.begin(), o.cluster_id.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.';
      })) {
    return absl::InvalidArgumentError(
        "cluster_id must be at most 128 letters, digits, '-', '_' or '.'");
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
  if (o.role != ShardRole::kTraining && o.replication.replicated()) {
    return absl::InvalidArgumentError(
        "only a training shard can be a replicated training shard "
        "(replication.directory or control_plane)");
  }
  return absl::OkStatus();
}

// A training shard: tables, restore, write order, services.
absl::StatusOr<std::unique_ptr<TrainingParts>> AssembleTraining(
    const ShardOptions& options, RpcMetrics* metrics, MemoryGuard* memory) {
  auto parts = std::make_unique<TrainingParts>(options, metrics, memory);
  for (const proto::TableConfig& config : options.tables.table()) {
    absl::StatusOr<TableRegistry::CreateResult> created =
        parts->registry.Create(config);
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat("table '", config.name(),
                                       "': ", created.status().message()));
    }
  }
  TrainingServiceOptions service = options.service;
  if (!options.restore.empty()) {
    ASSIGN_OR_RETURN(parts->restored,
                     parts->checkpointer.Restore(options.restore));
    service.restored_step = static_cast<int64_t>(parts->restored.step());
  }
  WriteOrder* writes = nullptr;
  if (options.replication.replicated()) {
    ReplicationOptions replication = options.replication;
    replication.shard = options.service.shard_index;
    replication.cluster_id = options.cluster_id;
    // The backups' writes go to the service made below, which exists
    // before Run lets any arrive.
    TrainingParts* p = parts.get();
    ASSIGN_OR_RETURN(
        parts->replicator,
        Replicator::Create(replication, &parts->registry, &parts->deduplicator,
                           &parts->checkpointer, metrics, parts->memory,
                           [p](const proto::ReplicatedOp& op) {
                             return p->service->ApplyForwarded(op);
                           }));
    parts->replication = std::make_unique<ReplicationServiceImpl>(
        parts->replicator.get(), metrics);
    writes = parts->replicator.get();
  } else {
    parts->unreplicated =
        NewUnreplicatedWriteOrder(options.service.incarnation);
    writes = parts->unreplicated.get();
  }
  parts->service = std::make_unique<TrainingServiceImpl>(
      std::move(service), &parts->registry, writes, &parts->deduplicator,
      &parts->checkpointer, &parts->publisher, metrics, parts->memory);
  return parts;
}

absl::StatusOr<std::unique_ptr<ServingParts>> AssembleServing(
    const ShardOptions& options, RpcMetrics* metrics) {
  auto parts = std::make_unique<ServingParts>();
  FollowerOptions follow = options.follow;
  if (!options.follow_control_plane.empty()) {
    control::EtcdOptions etcd;
    etcd.endpoints = options.follow_control_plane;
    etcd.security = follow.security;
    EtcdDirectoryOptions directory_options;
    directory_options.cluster_id = options.cluster_id;
    ASSIGN_OR_RETURN(
        std::shared_ptr<EtcdDirectoryClient> directory,
        EtcdDirectoryClient::Connect(std::move(etcd), directory_options));
    follow.find_primary =
        [directory](int32_t shard) -> absl::StatusOr<std::string> {
      ASSIGN_OR_RETURN(const proto::ReplicaView view, directory->View(shard));
      if (view.primary().empty()) {
        return absl::UnavailableError(absl::StrCat("training shard ", shard,
                                                   " has no primary in ",
                                                   directory->Describe()));
      }
      return view.primary();
    };
  }
  ASSIGN_OR_RETURN(parts->follower, Follower::Start(std::move(follow)));
  ServingServiceOptions serving;
  serving.shard_index = options.follow.shard_index;
  serving.num_shards = options.follow.num_shards;
  serving.max_keys_per_request = options.max_lookup_keys;
  serving.max_response_bytes = options.service.max_response_bytes;
  parts->service = std::make_unique<ServingServiceImpl>(
      serving, parts->follower.get(), metrics);
  return parts;
}

proto::ServerIdentity Identity(const ShardOptions& options,
                               proto::ServerIdentity::Role role,
                               int32_t shard_index, int32_t num_shards) {
  proto::ServerIdentity identity;
  identity.set_cluster_id(options.cluster_id);
  identity.set_role(role);
  identity.set_shard_index(shard_index);
  identity.set_num_shards(num_shards);
  return identity;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Shard>> Shard::Start(ShardOptions options) {
  RETURN_IF_ERROR(CheckOptions(options));
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   security::MakeServerCredentials(options.security));
  auto parts = std::make_unique<Parts>(std::move(options));
  const ShardOptions& o = parts->options;

  // Our own health service (health_service.h), not gRPC's.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  switch (o.role) {
    case ShardRole::kTraining: {
      ASSIGN_OR_RETURN(parts->training,
                       AssembleTraining(o, &parts->metrics, &parts->memory));
      TrainingParts* training = parts->training.get();
      parts->stats = std::make_unique<StatsServiceImpl>(
          &parts->metrics, &parts->memory,
          [training](const proto::StatsRequest& request,
                     proto::StatsResponse* response) {
            return training->service->FillStats(request, response);
          },
          Identity(o, proto::ServerIdentity::TRAINING, o.service.shard_index,
                   o.service.num_shards));
      parts->refusal = std::make_unique<RoleRefusal>(
          absl::StrCat("training shard ", o.service.shard_index, " of ",
                       o.service.num_shards,
                       " (it serves TrainingService, Coordination and "
                       "StatsService",
                       training->replication != nullptr ? ", Replication" : "",
                       ")"),
          "Send serving calls to a serving replica (ps_server "
          "--role=serving) and directory calls to the coordinator "
          "(--role=coordinator).");
      builder.RegisterService(training->service.get());
      builder.RegisterService(&training->coordination);
      if (training->replication != nullptr) {
        builder.RegisterService(training->replication.get());
      }
      break;
    }
    case ShardRole::kServing: {
      ASSIGN_OR_RETURN(parts->serving, AssembleServing(o, &parts->metrics));
      ServingServiceImpl* serving = parts->serving->service.get();
      parts->stats = std::make_unique<StatsServiceImpl>(
          &parts->metrics, &parts->memory,
          [serving](const proto::StatsRequest& request,
                    proto::StatsResponse* response) {
            return serving->FillStats(request, response);
          },
          Identity(o, proto::ServerIdentity::SERVING, o.follow.shard_index,
                   o.follow.num_shards));
      parts->refusal = std::make_unique<RoleRefusal>(
          "a serving replica (read-only: it follows training's checkpoints "
          "and publications; it serves ServingService and StatsService)",
          "Send training calls to the training shards.");
      builder.RegisterService(serving);
      break;
    }
    case ShardRole::kCoordinator: {
      parts->coordinator =
          std::make_unique<CoordinatorParts>(o, &parts->metrics);
      parts->stats = std::make_unique<StatsServiceImpl>(
          &parts->metrics, &parts->memory, nullptr,
          Identity(o, proto::ServerIdentity::COORDINATOR, 0, 1));
      parts->refusal = std::make_unique<RoleRefusal>(
          "the coordinator of replicated training shards (it serves "
          "ReplicaDirectory, Coordination and StatsService)",
          "Send training calls to the training shards.");
      builder.RegisterService(&parts->coordinator->service);
      builder.RegisterService(&parts->coordinator->coordination);
      break;
    }
  }
  builder.RegisterService(parts->stats.get());
  builder.RegisterService(&parts->health);
  builder.RegisterCallbackGenericService(parts->refusal.get());

  const std::string address = wire::HostPort(o.host, o.port);
  builder.AddListeningPort(address, credentials, &parts->port);
  // gRPC binds with SO_REUSEPORT by default: a second server on a port in
  // use would start and silently take half of its connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  wire::AcceptClientPings(builder);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  parts->server = builder.BuildAndStart();
  if (parts->server == nullptr || parts->port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", address,
                     " (in use, or not an address of this host)"));
  }
  if (o.metrics_port >= 0) {
    // Prometheus text, rendered from the same numbers as Stats.
    Parts* p = parts.get();
    LimitIdleConnections(p->metrics_http);
    p->metrics_http.Get("/metrics",
                        [p](const httplib::Request&, httplib::Response& res) {
                          res.set_content(RenderPrometheus(p->stats->Collect()),
                                          "text/plain; version=0.0.4");
                        });
    const std::string& metrics_host =
        o.metrics_host.empty() ? o.host : o.metrics_host;
    p->metrics_port =
        o.metrics_port == 0
            ? p->metrics_http.bind_to_any_port(metrics_host)
            : (p->metrics_http.bind_to_port(metrics_host, o.metrics_port)
                   ? o.metrics_port
                   : -1);
    if (p->metrics_port < 0) {
      p->server->Shutdown();
      return absl::UnavailableError(absl::StrCat(
          "cannot listen for metrics on ", metrics_host, ":", o.metrics_port));
    }
    p->metrics_thread =
        std::thread([p] { p->metrics_http.listen_after_bind(); });
  }
  if (parts->training != nullptr && parts->training->replicator != nullptr) {
    parts->training->replicator->Run(o.replication.member.empty()
                                         ? wire::HostPort(o.host, parts->port)
                                         : o.replication.member);
  }
  return std::unique_ptr<Shard>(new Shard(std::move(parts)));
}

Replicator* Shard::replicator() {
  return parts_->training == nullptr ? nullptr
                                     : parts_->training->replicator.get();
}

Shard::Shard(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}

Shard::~Shard() {
  Shutdown();
  Wait();
}

int Shard::port() const { return parts_->port; }
std::string Shard::address() const {
  return wire::HostPort(parts_->options.host, parts_->port);
}
int Shard::metrics_port() const { return parts_->metrics_port; }
const proto::LoadResponse& Shard::restored() const {
  static const proto::LoadResponse* const kNothing = new proto::LoadResponse();
  return parts_->training == nullptr ? *kNothing : parts_->training->restored;
}
int Shard::num_tables() const {
  return parts_->training == nullptr
             ? 0
             : static_cast<int>(parts_->training->registry.List().size());
}

void Shard::Shutdown(absl::Duration grace) {
  {
    MutexLock lock(&parts_->shutdown_mu);
    if (parts_->shut_down) return;
    parts_->shut_down = true;
  }
  // Subscribers' and health watchers' streams end at once rather than at
  // the grace's end.
  parts_->health.Shutdown();
  if (parts_->training != nullptr) parts_->training->publisher.Close();
  parts_->server->Shutdown(std::chrono::system_clock::now() +
                           absl::ToChronoMilliseconds(grace));
  if (parts_->metrics_port >= 0) parts_->metrics_http.stop();
}

void Shard::Wait() {
  parts_->server->Wait();
  MutexLock lock(&parts_->shutdown_mu);
  if (parts_->metrics_thread.joinable()) parts_->metrics_thread.join();
}

proto::StatsResponse Shard::CollectStats() { return parts_->stats->Collect(); }

}  // namespace embedps::server
