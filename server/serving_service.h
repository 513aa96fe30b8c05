// ServingService: the read path of a serving replica. Lookup answers a
// batch of slots — keys, bag offsets, pooling — from one version of the
// replica's tables (the latest, or an exact training step), changing
// nothing; Version says which version is served.
//
// Every request is checked before any table is read (table names, whole
// keys of this serving shard, offsets that start at 0, never decrease and
// end at the number of keys, a known pooling and value type, the key
// limit), and refused with INVALID_ARGUMENT, NOT_FOUND,
// FAILED_PRECONDITION or RESOURCE_EXHAUSTED naming what is wrong.
//
// Thread safety: thread-safe (the follower's versions are immutable).
#ifndef EMBEDPS_SERVER_SERVING_SERVICE_H_
#define EMBEDPS_SERVER_SERVING_SERVICE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "proto/serving.grpc.pb.h"
#include "proto/stats.pb.h"
#include "server/follower.h"
#include "server/rpc_metrics.h"

namespace embedps::server {

struct ServingServiceOptions {
  // This replica's serving shard (keys of other shards are refused).
  int32_t shard_index = 0;
  int32_t num_shards = 1;
  // Keys one Lookup may carry, all slots together. Default: 1 Mi.
  uint64_t max_keys_per_request = uint64_t{1} << 20;
  // Bytes one Lookup's rows and bags may take, all slots together
  // (checked before they are read). Default: 1 GiB.
  uint64_t max_response_bytes = uint64_t{1} << 30;
  // How long a Lookup of an exact version waits for it to arrive.
  // Default: 2 s.
  absl::Duration version_wait = absl::Seconds(2);
};

class ServingServiceImpl final : public proto::ServingService::Service {
 public:
  // `follower` and `metrics` must outlive the service.
  ServingServiceImpl(ServingServiceOptions options, Follower* follower,
                     RpcMetrics* metrics);

  grpc::Status Lookup(grpc::ServerContext* context,
                      const proto::LookupRequest* request,
                      proto::LookupResponse* response) override;
  grpc::Status Version(grpc::ServerContext* context,
                       const proto::ServingVersionRequest* request,
                       proto::ServingVersionResponse* response) override;
  // The dense model of the version served (or of an exact retained one),
  // for ps_predictor: FAILED_PRECONDITION if that version has none.
  grpc::Status DenseModel(grpc::ServerContext* context,
                          const proto::DenseModelRequest* request,
                          proto::DenseModelResponse* response) override;

  // The serving replica's part of a Stats answer (StatsServiceImpl): its
  // serving shard, the version it serves, and that version's base tables.
  absl::Status FillStats(const proto::StatsRequest& request,
                         proto::StatsResponse* response);

 private:
  grpc::Status LookupImpl(const proto::LookupRequest& request,
                          proto::LookupResponse* response);

  const ServingServiceOptions options_;
  Follower* const follower_;
  RpcMetrics* const metrics_;
};

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_SERVING_SERVICE_H_
