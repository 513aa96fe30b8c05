#include "worker/job_flags.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/malloc_options.h"
#include "dense/collective/file_store.h"
#include "dense/collective/in_memory_store.h"
#include "security/flags.h"
#include "worker/coordination_store.h"
#include "worker/etcd_store.h"

ABSL_FLAG(int32_t, rank, 0, "this worker's rank, in [0, world_size)");
ABSL_FLAG(int32_t, world_size, 1, "number of workers in the job");
ABSL_FLAG(std::string, rendezvous_dir, "",
          "a directory all workers can reach, fresh for each job, where they "
          "meet (instead of a ps_server's Coordination service)");
ABSL_FLAG(std::string, coordinator, "",
          "host:port of a ps_server whose Coordination service the workers "
          "meet through");
ABSL_FLAG(std::string, control_plane, "",
          "etcd's endpoints, etcd://host:port[,host:port...] (etcds://... over "
          "TLS with --tls_ca, --tls_cert, --tls_key): the workers meet there, "
          "each one's keys held by its own lease");
ABSL_FLAG(std::string, job_name, "",
          "prefix of this job's rendezvous keys (default: the command's)");
ABSL_FLAG(std::string, gloo_host, "127.0.0.1",
          "address this worker listens on for its peers' Gloo connections");
ABSL_FLAG(int32_t, timeout_s, 60,
          "seconds before a rendezvous or collective that a peer never "
          "joins fails (instead of hanging)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu (BLAS, Gloo) or cuda (cuBLAS, NCCL)");
ABSL_FLAG(int32_t, cuda_device, 0, "--device=cuda: the device ordinal");
ABSL_FLAG(bool, allow_tf32, false,
          "--device=cuda: allow TF32 tensor-core GEMMs (faster, less exact)");
ABSL_FLAG(std::string, output_dir, "",
          "where the job writes its results (see the command's help)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off");

namespace embedps::worker {

absl::StatusOr<JobFromFlags> ReadJobFlags(
    const std::string& default_job_name,
    const std::string& fallback_coordinator) {
  JobFromFlags out;
  JobMembership& job = out.job;
  job.rank = absl::GetFlag(FLAGS_rank);
  job.world_size = absl::GetFlag(FLAGS_world_size);
  if (job.world_size < 1 || job.rank < 0 || job.rank >= job.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank=", job.rank,
                     " must be in [0, --world_size=", job.world_size, ")"));
  }
  job.job_name = absl::GetFlag(FLAGS_job_name).empty()
                     ? default_job_name
                     : absl::GetFlag(FLAGS_job_name);
  job.gloo_host = absl::GetFlag(FLAGS_gloo_host);
  if (absl::GetFlag(FLAGS_timeout_s) <= 0) {
    return absl::InvalidArgumentError("--timeout_s must be > 0");
  }
  job.timeout = absl::Seconds(absl::GetFlag(FLAGS_timeout_s));
  const std::string dir = absl::GetFlag(FLAGS_rendezvous_dir);
  std::string coordinator = absl::GetFlag(FLAGS_coordinator);
  const std::string control_plane = absl::GetFlag(FLAGS_control_plane);
  if (int{!dir.empty()} + int{!coordinator.empty()} +
          int{!control_plane.empty()} >
      1) {
    return absl::InvalidArgumentError(
        "give one of --rendezvous_dir, --coordinator and --control_plane");
  }
  if (!control_plane.empty()) {
    control::EtcdOptions options;
    options.endpoints = control_plane;
    options.security = security::ChannelSecurityFromFlags();
    absl::StatusOr<std::unique_ptr<control::EtcdClient>> etcd =
        control::EtcdClient::Create(std::move(options));
    if (!etcd.ok()) return etcd.status();
    absl::StatusOr<std::unique_ptr<EtcdStore>> store =
        EtcdStore::Create(*std::move(etcd));
    if (!store.ok()) return store.status();
    out.store = *std::move(store);
  } else if (!dir.empty()) {
    absl::StatusOr<std::unique_ptr<dense::Store>> store =
        dense::CreateFileStore(dir);
    if (!store.ok()) return store.status();
    out.store = *std::move(store);
  } else if (job.world_size == 1) {
    // One rank meets only itself.
    out.store = std::make_unique<dense::InMemoryStore>();
  } else {
    if (coordinator.empty()) {
      if (fallback_coordinator.find('|') != std::string::npos) {
        return absl::InvalidArgumentError(
            "replicated shards (a|b in --servers): give --coordinator, the "
            "coordinator's host:port (the workers meet through its "
            "Coordination service), or --control_plane (etcd)");
      }
      coordinator = fallback_coordinator;
    }
    if (coordinator.empty()) {
      return absl::InvalidArgumentError(
          "--world_size > 1 needs --rendezvous_dir, --coordinator or "
          "--control_plane");
    }
    absl::StatusOr<std::unique_ptr<client::CoordinationClient>> client =
        client::CoordinationClient::Create(
            coordinator, security::ChannelSecurityFromFlags());
    if (!client.ok()) return client.status();
    out.store = std::make_unique<CoordinationStore>(*std::move(client));
  }
  job.store = out.store.get();
  return out;
}

absl::StatusOr<dense::ModelOptions> ReadModelFlags() {
  dense::ModelOptions model;
  absl::StatusOr<dense::Backend> backend =
      dense::ParseBackend(absl::GetFlag(FLAGS_device));
  if (!backend.ok()) return backend.status();
  model.backend = *backend;
  model.device = absl::GetFlag(FLAGS_cuda_device);
  model.allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  return model;
}

int ParseJobCommandLine(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  ReuseLargeAllocations();
  if (absl::Status s = SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    return 2;
  }
  return -1;
}

}  // namespace embedps::worker
