// ps_server: one shard of the embedps parameter server.
//
//   ps_server --port=50051 --shard_index=0 --num_shards=2 --tables=tables.txtpb
//
// Serves TrainingService, gRPC health checking and server reflection
// (grpcurl can list and call everything). SIGTERM or SIGINT: stop taking
// calls, finish those in flight (up to --shutdown_grace), exit 0.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "checkpoint/manifest.h"
#include "common/connection_cap.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "common/process_memory.h"
#include "common/program_usage.h"
#include "common/status_macros.h"
#include "common/text_proto.h"
#include "security/flags.h"
#include "server/path_confinement.h"
#include "server/serving_storage.h"
#include "server/shard.h"
#include "wire/host_port.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "address to listen on: loopback by default; 0.0.0.0 (or a "
          "host's address) to serve other machines");
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
ABSL_FLAG(std::string, metrics_host, "",
          "address of the /metrics page (plain HTTP, read-only); empty: "
          "--host");
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
ABSL_FLAG(std::string, checkpoint_root, "",
          "the directory checkpoints are written into and read from: Save "
          "and Load requests, --restore, --follow_checkpoints and the files "
          "their manifests name must resolve inside it (PERMISSION_DENIED "
          "otherwise); empty: Save and Load requests are refused");
ABSL_FLAG(int, keep_checkpoints, 0,
          "shard 0 only: after writing its files of a checkpoint, delete all "
          "but this many newest complete checkpoints of that root (never a "
          "file a kept one's chain needs); 0: keep all. For clients that do "
          "not prune themselves (ps_worker prunes with its config's "
          "keep_checkpoints): set one or the other");
ABSL_FLAG(uint64_t, max_keys_per_request, uint64_t{4} << 20,
          "most keys one Pull or Push may carry (RESOURCE_EXHAUSTED above)");
ABSL_FLAG(int32_t, pull_threads, 4,
          "threads one Pull of many keys reads the table on (pieces of at "
          "least 16384 keys; 1: the call's own thread)");
ABSL_FLAG(int32_t, sync_apply_threads, 4,
          "threads a completed SYNC step is applied on, at most the "
          "machine's cores (pieces of at least 8192 keys; 1: the thread of "
          "the push that completed it)");
ABSL_FLAG(uint64_t, max_sketch_counters, uint64_t{1} << 28,
          "most admission sketch counters (a byte each) one table may ask "
          "for (RESOURCE_EXHAUSTED above)");
ABSL_FLAG(uint64_t, max_expected_rows_mb, 8192,
          "most MiB one table's expected_rows may commit when it is created "
          "(RESOURCE_EXHAUSTED above)");
ABSL_FLAG(uint64_t, max_tables, 256,
          "most tables this server holds at once (DropTable frees a place)");
ABSL_FLAG(std::string, memory_limit_mb, "auto",
          "resident memory (MiB) past which calls that would allocate "
          "(Pull, Push, CreateTable, a restore) are refused with "
          "RESOURCE_EXHAUSTED before allocating; auto: 80% of the memory "
          "this process may use (the machine's, or its container's limit); "
          "0: no limit. Where several servers share a machine, give each "
          "its share");
ABSL_FLAG(uint64_t, max_unread_mb_per_peer, 1024,
          "MiB of Pull answers built for one peer host that it has not read "
          "yet; past it the host's Pulls are answered UNAVAILABLE (clients "
          "retry) until it reads; a lone answer is always sent. 0: no bound");
ABSL_FLAG(uint64_t, max_coordination_keys, uint64_t{64} << 10,
          "most keys and barrier names the Coordination store holds");
ABSL_FLAG(uint64_t, max_coordination_mb, 64,
          "most MiB of keys and values the Coordination store holds");
ABSL_FLAG(int32_t, max_message_bytes, 1 << 30,
          "largest gRPC message accepted or sent, in bytes");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(10),
          "on SIGTERM, how long in-flight calls may take to finish");
ABSL_FLAG(std::string, role, "training",
          "training: a shard of the training cluster; serving: a read-only "
          "replica of serving shard --shard_index of --num_shards that "
          "follows training (--follow_checkpoints, --training_servers) and "
          "answers ServingService.Lookup; coordinator: the replica directory "
          "of replicated training shards (and a Coordination store), no "
          "tables");
ABSL_FLAG(std::string, replica_directory, "",
          "training: host:port of the coordinator (--role=coordinator); set, "
          "this server is one replica of shard --shard_index (every replica "
          "of a shard gets the same flags), docs/operations.md "
          "\"Replication\"");
ABSL_FLAG(
    std::string, control_plane, "",
    "etcd's endpoints, etcd://host:port[,host:port...] (or etcds://... over "
    "TLS: the CA of --tls_ca, the client certificate of --tls_cert and "
    "--tls_key). training: this server is one replica of shard "
    "--shard_index whose primary is elected in etcd, in place of "
    "--replica_directory (docs/operations.md \"Replication\"); serving: "
    "the training shards' primaries are found there (--training_shards of "
    "them, of --cluster_id), in place of --training_servers");
ABSL_FLAG(int32_t, training_shards, 0,
          "serving with --control_plane: the training job's shard count");
ABSL_FLAG(std::string, advertise, "",
          "training, replicated: this replica's address as clients and the "
          "other replicas reach it (default: --host:port)");
ABSL_FLAG(absl::Duration, replica_lease, absl::Seconds(2),
          "coordinator: how long a primary may accept writes after its last "
          "heartbeat was answered; another replica takes over after "
          "lease + lease/2 of silence");
ABSL_FLAG(absl::Duration, forward_timeout, absl::Seconds(2),
          "training, replicated: how long a forward to a backup may take, "
          "beyond twice the primary's own time applying what it carries, "
          "before the backup is dropped from the shard");
ABSL_FLAG(std::string, follow_checkpoints, "",
          "serving: the training job's checkpoint root; the replica starts "
          "from its latest complete checkpoint and loads newer ones");
ABSL_FLAG(std::string, training_servers, "",
          "serving: host:port of every training shard, in order (a|b: the "
          "replicas of a replicated shard; the replica follows its "
          "primary); the replica applies their publications (empty: "
          "checkpoints only)");
ABSL_FLAG(std::string, cluster_id, "",
          "the cluster this server belongs to, stated to clients and "
          "workers, which refuse a server of another cluster (letters, "
          "digits, '-', '_', '.'; empty: none)");
ABSL_FLAG(std::string, serving_storage, "",
          "serving: how every table's rows are stored: float32, float16 or "
          "int8 (a scale a row); empty: each table's serving.storage");
ABSL_FLAG(uint64_t, serve_step, 0,
          "serving: serve the checkpoint of exactly this training step and "
          "nothing newer (a rollback); 0: follow training");
ABSL_FLAG(absl::Duration, checkpoint_poll, absl::Seconds(5),
          "serving: how often the checkpoint root is checked");
ABSL_FLAG(absl::Duration, checkpoint_wait, absl::Minutes(10),
          "serving: how long to wait for training's first checkpoint when "
          "there is none yet (the replica serves nothing until then)");
ABSL_FLAG(absl::Duration, ttl_sweep_interval, absl::Seconds(10),
          "training: how often the rows of tables with a TTL "
          "(TableConfig.eviction) that went untouched past it are removed; "
          "0: never");
ABSL_FLAG(int64_t, publish_history_mb, 512,
          "training: MiB of publications kept for serving replicas that "
          "fall behind or reconnect");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");

namespace embedps::server {
namespace {

absl::StatusOr<proto::TableConfigList> ReadTables(const std::string& path) {
  proto::TableConfigList list;
  RETURN_IF_ERROR(ReadTextProtoFile(
      path, absl::StrCat("--tables file '", path, "'"), &list));
  return list;
}

// --memory_limit_mb in bytes: auto, 0 (none) or MiB.
absl::StatusOr<uint64_t> MemoryLimitFromFlag(const std::string& value) {
  if (value == "auto") {
    const uint64_t available = AvailableMemoryBytes();
    if (available == 0) {
      return absl::InvalidArgumentError(
          "--memory_limit_mb=auto: the memory this process may use cannot "
          "be read (/proc/meminfo); give the limit in MiB, or 0 for none");
    }
    return available / 10 * 8;
  }
  uint64_t mib = 0;
  if (!absl::SimpleAtoi(value, &mib) || mib > (uint64_t{1} << 43)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--memory_limit_mb must be auto, 0 (no limit) or MiB, not '",
        value.substr(0, 64), "'"));
  }
  return mib << 20;
}

// The flags as ShardOptions; INVALID_ARGUMENT naming a flag that cannot
// work.
absl::StatusOr<ShardOptions> OptionsFromFlags() {
  ShardOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.service.shard_index = absl::GetFlag(FLAGS_shard_index);
  options.service.num_shards = absl::GetFlag(FLAGS_num_shards);
  options.service.max_keys_per_request =
      absl::GetFlag(FLAGS_max_keys_per_request);
  options.service.pull_threads = absl::GetFlag(FLAGS_pull_threads);
  if (options.service.pull_threads < 1 || options.service.pull_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--pull_threads=", options.service.pull_threads,
                     " must be in [1, 64]"));
  }
  options.num_workers = absl::GetFlag(FLAGS_num_workers);
  options.sync_apply_threads = absl::GetFlag(FLAGS_sync_apply_threads);
  if (options.sync_apply_threads < 1 || options.sync_apply_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--sync_apply_threads=", options.sync_apply_threads,
                     " must be in [1, 64]"));
  }
  // More threads than cores only take turns.
  options.sync_apply_threads =
      std::min<int32_t>(options.sync_apply_threads,
                        std::max(1u, std::thread::hardware_concurrency()));
  if (options.service.num_shards < 1 || options.service.shard_index < 0 ||
      options.service.shard_index >= options.service.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_index=", options.service.shard_index,
        " must be in [0, --num_shards=", options.service.num_shards, ")"));
  }
  if (options.num_workers < 1) {
    return absl::InvalidArgumentError("--num_workers must be at least 1");
  }
  if (const std::string data_dir = absl::GetFlag(FLAGS_data_dir);
      !data_dir.empty()) {
    options.spill_root =
        absl::StrCat(data_dir, "/",
                     checkpoint::ShardDirectoryName(options.service.shard_index,
                                                    options.service.num_shards),
                     "/spill");
  }
  if (absl::GetFlag(FLAGS_spill_block_cache_mb) < 1) {
    return absl::InvalidArgumentError(
        "--spill_block_cache_mb must be at least 1");
  }
  options.spill_block_cache_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_spill_block_cache_mb)) << 20;
  options.spill_read_around = absl::GetFlag(FLAGS_spill_read_around);
  options.ttl_sweep_interval = absl::GetFlag(FLAGS_ttl_sweep_interval);
  if (const std::string path = absl::GetFlag(FLAGS_tables); !path.empty()) {
    ASSIGN_OR_RETURN(options.tables, ReadTables(path));
  }
  options.restore = absl::GetFlag(FLAGS_restore);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root);
  options.keep_checkpoints = absl::GetFlag(FLAGS_keep_checkpoints);
  if (options.keep_checkpoints < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--keep_checkpoints=", options.keep_checkpoints,
                     " must be >= 0 (0: keep every checkpoint)"));
  }
  if (!options.checkpoint_root.empty()) {
    std::error_code error;
    if (!std::filesystem::is_directory(options.checkpoint_root, error)) {
      return absl::InvalidArgumentError(absl::StrCat("--checkpoint_root '",
                                                     options.checkpoint_root,
                                                     "' is not a directory"));
    }
    for (const auto& [flag, path] :
         {std::pair<const char*, std::string>{"--restore", options.restore},
          {"--follow_checkpoints", absl::GetFlag(FLAGS_follow_checkpoints)}}) {
      if (path.empty()) continue;
      absl::StatusOr<std::string> inside =
          ResolveInside(options.checkpoint_root, path, flag);
      if (!inside.ok())
        return absl::InvalidArgumentError(inside.status().message());
    }
  }
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (options.max_message_bytes < 1 << 20) {
    return absl::InvalidArgumentError("--max_message_bytes must be >= 1 MiB");
  }
  options.service.max_response_bytes =
      static_cast<uint64_t>(options.max_message_bytes) - (uint64_t{64} << 10);
  options.service.max_sketch_counters =
      absl::GetFlag(FLAGS_max_sketch_counters);
  options.max_expected_rows_bytes = absl::GetFlag(FLAGS_max_expected_rows_mb)
                                    << 20;
  options.service.max_tables = absl::GetFlag(FLAGS_max_tables);
  options.service.max_unread_bytes_per_peer =
      absl::GetFlag(FLAGS_max_unread_mb_per_peer) << 20;
  ASSIGN_OR_RETURN(options.service.memory_limit_bytes,
                   MemoryLimitFromFlag(absl::GetFlag(FLAGS_memory_limit_mb)));
  options.coordination.max_entries = absl::GetFlag(FLAGS_max_coordination_keys);
  options.coordination.max_bytes = absl::GetFlag(FLAGS_max_coordination_mb)
                                   << 20;
  options.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  options.metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.security = security::ServerSecurityFromFlags();
  if (absl::GetFlag(FLAGS_publish_history_mb) < 1) {
    return absl::InvalidArgumentError("--publish_history_mb must be >= 1");
  }
  options.publisher.history_bytes =
      static_cast<uint64_t>(absl::GetFlag(FLAGS_publish_history_mb)) << 20;
  options.cluster_id = absl::GetFlag(FLAGS_cluster_id);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "serving") {
    options.role = ShardRole::kServing;
    options.follow.checkpoint_root = absl::GetFlag(FLAGS_follow_checkpoints);
    if (options.follow.checkpoint_root.empty()) {
      return absl::InvalidArgumentError(
          "--role=serving needs --follow_checkpoints=ROOT (the training "
          "job's checkpoint directory)");
    }
    for (absl::string_view server : absl::StrSplit(
             absl::GetFlag(FLAGS_training_servers), ',', absl::SkipEmpty())) {
      options.follow.training_servers.emplace_back(server);
    }
    options.follow_control_plane = absl::GetFlag(FLAGS_control_plane);
    options.follow.training_shards = absl::GetFlag(FLAGS_training_shards);
    if (!options.follow_control_plane.empty() &&
        (options.follow.training_shards < 1 ||
         !options.follow.training_servers.empty())) {
      return absl::InvalidArgumentError(
          "--role=serving --control_plane finds the training primaries in "
          "etcd: give --training_shards (their count), not "
          "--training_servers");
    }
    if (options.follow_control_plane.empty() &&
        options.follow.training_shards != 0) {
      return absl::InvalidArgumentError(
          "--training_shards applies with --control_plane only (else "
          "--training_servers lists the shards)");
    }
    options.follow.shard_index = options.service.shard_index;
    options.follow.num_shards = options.service.num_shards;
    options.follow.pinned_step = absl::GetFlag(FLAGS_serve_step);
    options.follow.checkpoint_poll = absl::GetFlag(FLAGS_checkpoint_poll);
    options.follow.spill_root = options.spill_root;
    if (const std::string storage = absl::GetFlag(FLAGS_serving_storage);
        !storage.empty()) {
      absl::StatusOr<proto::ServingConfig::Storage> parsed =
          ParseServingStorage(storage);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--serving_storage: ", parsed.status().message()));
      }
      options.follow.storage = *parsed;
    }
    options.follow.max_message_bytes = options.max_message_bytes;
    options.follow.security = security::ChannelSecurityFromFlags();
    if (!options.tables.table().empty() || !options.restore.empty()) {
      return absl::InvalidArgumentError(
          "--role=serving takes its tables from the checkpoints it follows: "
          "--tables and --restore do not apply");
    }
  } else if (role == "coordinator") {
    if (!options.tables.table().empty() || !options.restore.empty() ||
        !absl::GetFlag(FLAGS_replica_directory).empty()) {
      return absl::InvalidArgumentError(
          "--role=coordinator holds no tables: --tables, --restore and "
          "--replica_directory do not apply");
    }
    const absl::Duration lease = absl::GetFlag(FLAGS_replica_lease);
    if (lease < absl::Milliseconds(100) || lease > absl::Minutes(5)) {
      return absl::InvalidArgumentError(
          "--replica_lease must be in [100ms, 5m]");
    }
    options.role = ShardRole::kCoordinator;
    options.directory.lease = lease;
    options.directory.grace = lease / 2;
  } else if (role != "training") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--role must be training, serving or coordinator, not '", role, "'"));
  }
  if (role != "serving" && !absl::GetFlag(FLAGS_serving_storage).empty()) {
    return absl::InvalidArgumentError(
        "--serving_storage applies to --role=serving only");
  }
  const std::string control_plane = absl::GetFlag(FLAGS_control_plane);
  if (!control_plane.empty() && role == "coordinator") {
    return absl::InvalidArgumentError(
        "--control_plane replaces the coordinator: it applies to "
        "--role=training and --role=serving");
  }
  if (!control_plane.empty() &&
      !absl::GetFlag(FLAGS_replica_directory).empty()) {
    return absl::InvalidArgumentError(
        "--control_plane and --replica_directory are two ways to elect a "
        "shard's primary: give one");
  }
  if (role == "training" && (!absl::GetFlag(FLAGS_replica_directory).empty() ||
                             !control_plane.empty())) {
    options.replication.directory = absl::GetFlag(FLAGS_replica_directory);
    options.replication.control_plane = control_plane;
    options.replication.member = absl::GetFlag(FLAGS_advertise);
    options.replication.security = security::ChannelSecurityFromFlags();
    options.replication.forward_timeout = absl::GetFlag(FLAGS_forward_timeout);
    if (options.replication.forward_timeout < absl::Milliseconds(10)) {
      return absl::InvalidArgumentError("--forward_timeout must be >= 10ms");
    }
    // Leaves the shard fail-stop: the supervisor restarts it empty, and it
    // joins again (docs/operations.md "Replication").
    options.replication.on_deposed = [](const std::string& why) {
      Logger("server")->error(
          "this replica must restart to rejoin its shard ({}); exiting 75",
          why);
      std::fflush(nullptr);
      std::_Exit(75);
    };
  }
  return options;
}

int Run() {
  const auto log = Logger("server");
  if (absl::Status s = SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    log->error("{}", s.message());
    return 2;
  }
  absl::StatusOr<ShardOptions> options = OptionsFromFlags();
  if (!options.ok()) {
    log->error("{}", options.status().message());
    return 2;
  }
  if (options->checkpoint_root.empty() &&
      options->role == ShardRole::kTraining) {
    log->info(
        "no --checkpoint_root: Save and Load requests will be refused (set "
        "it to checkpoint this shard)");
  }
  if (!options->security.tls() && !wire::IsLoopbackHost(options->host)) {
    log->warn(
        "listening on {} in plain text without tokens: whoever reaches the "
        "port can change every table (--tls_cert, --tls_key, "
        "--train_token_file: docs/security.md)",
        options->host);
  }
  // Signals are taken by one thread with sigwait, so no handler runs in an
  // arbitrary gRPC thread. Block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  RaiseServerDescriptorLimit();
  if (options->service.memory_limit_bytes == 0) {
    log->info("no memory limit (--memory_limit_mb=0)");
  } else {
    log->info(
        "memory limit {} MiB (--memory_limit_mb={}): calls that would "
        "allocate past it are refused",
        options->service.memory_limit_bytes >> 20,
        absl::GetFlag(FLAGS_memory_limit_mb));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Shard>> shard = Shard::Start(*options);
  // A serving replica may start before training's first checkpoint.
  const absl::Time wait_until = start + absl::GetFlag(FLAGS_checkpoint_wait);
  bool said = false;
  while (options->role == ShardRole::kServing && !shard.ok() &&
         shard.status().code() == absl::StatusCode::kNotFound &&
         absl::Now() < wait_until) {
    if (!said) {
      log->info("no checkpoint under {} yet: waiting for training's first",
                options->follow.checkpoint_root);
      said = true;
    }
    // Still stoppable: SIGTERM/SIGINT are blocked, so take one here.
    const timespec quarter_second{0, 250'000'000};
    if (sigtimedwait(&stop_signals, nullptr, &quarter_second) > 0) {
      log->info("stopped before the first checkpoint");
      return 0;
    }
    shard = Shard::Start(*options);
  }
  if (!shard.ok()) {
    log->error("{}", shard.status().ToString());
    return shard.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (!options->restore.empty()) {
    const proto::LoadResponse& restored = (*shard)->restored();
    log->info("restored checkpoint '{}' (step {}, {} rows) in {:.2f} s",
              restored.name(), restored.step(), restored.rows(),
              absl::ToDoubleSeconds(absl::Now() - start));
  }
  const int port = (*shard)->port();
  const int metrics_port = (*shard)->metrics_port();
  const std::string what =
      options->role == ShardRole::kCoordinator
          ? std::string("coordinator (replica directory)")
          : absl::StrCat(
                options->role == ShardRole::kServing ? "serving" : "training",
                " shard ", options->service.shard_index, " of ",
                options->service.num_shards);
  log->info(
      "{} listening on {} ({}{})", what, wire::HostPort(options->host, port),
      options->security.tls()
          ? (options->security.client_ca_file.empty() ? "TLS" : "mutual TLS")
          : "plain text",
      options->security.train_token_file.empty() &&
              options->security.read_token_file.empty()
          ? ""
          : ", tokens");
  if (metrics_port >= 0) {
    log->info(
        "metrics on http://{}:{}/metrics",
        options->metrics_host.empty() ? options->host : options->metrics_host,
        metrics_port);
  }
  std::printf("port %d\n", port);
  if (metrics_port >= 0) std::printf("metrics_port %d\n", metrics_port);
  std::fflush(stdout);
  if (const std::string path = absl::GetFlag(FLAGS_port_file); !path.empty()) {
    // Write then rename, so a reader never sees a half-written file.
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp) << port << "\n" << metrics_port << "\n";
    std::rename(tmp.c_str(), path.c_str());
  }

  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    log->info("signal {}: finishing in-flight calls, then exiting", signal);
    (*shard)->Shutdown(absl::GetFlag(FLAGS_shutdown_grace));
  });
  (*shard)->Wait();
  stopper.join();
  log->info("stopped");
  return 0;
}

}  // namespace
}  // namespace embedps::server

int main(int argc, char** argv) {
  embedps::SetProgramUsage(
      "one shard of the embedps parameter server.\n"
      "  ps_server --port=50051 --shard_index=0 --num_shards=2 "
      "--tables=tables.txtpb",
      {"server/ps_server.cc", embedps::security::kClientFlagsFile,
       embedps::security::kServerFlagsFile});
  absl::ParseCommandLine(argc, argv);
  embedps::ReuseLargeAllocations();
  return embedps::server::Run();
}
