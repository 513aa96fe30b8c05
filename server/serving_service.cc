#include "server/serving_service.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "server/table_registry.h"
#include "wire/float16.h"
#include "wire/grpc_status.h"

namespace embedps::server {
namespace {

grpc::Status Refuse(grpc::StatusCode code, const std::string& message) {
  return grpc::Status(code, wire::BoundedMessage(message));
}

// The bag boundaries of a slot of `keys` keys, checked.
absl::StatusOr<std::vector<int32_t>> Offsets(const proto::LookupSlot& slot,
                                             size_t keys, int index) {
  const std::string& bytes = slot.offsets();
  std::vector<int32_t> offsets;
  if (bytes.empty()) {
    offsets.resize(keys + 1);
    for (size_t i = 0; i <= keys; ++i) offsets[i] = static_cast<int32_t>(i);
    return offsets;
  }
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "slot ", index, " (table '", slot.table(), "'): offsets ", why));
  };
  if (bytes.size() % sizeof(int32_t) != 0 || bytes.size() < sizeof(int32_t)) {
    return bad(
        absl::StrCat("must be packed little-endian int32, bags + 1 of "
                     "them; got ",
                     bytes.size(), " bytes"));
  }
  offsets.resize(bytes.size() / sizeof(int32_t));
  std::memcpy(offsets.data(), bytes.data(), bytes.size());
  if (offsets.front() != 0) {
    return bad(absl::StrCat("must start at 0, not ", offsets.front()));
  }
  for (size_t b = 1; b < offsets.size(); ++b) {
    if (offsets[b] < offsets[b - 1]) {
      return bad(absl::StrCat("decrease at bag ", b - 1, " (", offsets[b - 1],
                              " then ", offsets[b], ")"));
    }
  }
  if (static_cast<size_t>(offsets.back()) != keys) {
    return bad(absl::StrCat("end at ", offsets.back(), " but the slot has ",
                            keys, " keys"));
  }
  return offsets;
}

}  // namespace

absl::Status ServingServiceImpl::FillStats(const proto::StatsRequest&,
                                           proto::StatsResponse* stats) {
  stats->set_shard_index(options_.shard_index);
  stats->set_num_shards(options_.num_shards);
  stats->set_serving_replica(true);
  *stats->mutable_serving() = follower_->Describe();
  // The tables are the served base's.
  const std::shared_ptr<const ServingVersion> version = follower_->Current();
  for (const TableRegistry::Entry& entry : version->registry->List()) {
    proto::TableStatsProto* out = stats->add_table();
    out->set_table_id(entry.table_id);
    out->set_name(entry.config->name());
    TableStatsToProto(entry.table->Stats(), out);
  }
  return absl::OkStatus();
}

ServingServiceImpl::ServingServiceImpl(ServingServiceOptions options,
                                       Follower* follower, RpcMetrics* metrics)
    : options_(options), follower_(follower), metrics_(metrics) {}

grpc::Status ServingServiceImpl::Lookup(grpc::ServerContext*,
                                        const proto::LookupRequest* request,
                                        proto::LookupResponse* response) {
  return metrics_->Measure(RpcMethod::kServingLookup,
                           [&] { return LookupImpl(*request, response); });
}

grpc::Status ServingServiceImpl::LookupImpl(const proto::LookupRequest& request,
                                            proto::LookupResponse* response) {
  if (!proto::ValueType_IsValid(request.value_type())) {
    return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                  absl::StrCat("unknown value_type ", request.value_type(),
                               " (FLOAT32 = 0, FLOAT16 = 1)"));
  }
  uint64_t total_keys = 0;
  for (const proto::LookupSlot& slot : request.slot()) {
    total_keys += slot.keys().size() / sizeof(uint64_t);
  }
  if (total_keys > options_.max_keys_per_request) {
    return Refuse(grpc::StatusCode::RESOURCE_EXHAUSTED,
                  absl::StrCat(total_keys,
                               " keys in one Lookup; this replica "
                               "takes at most ",
                               options_.max_keys_per_request));
  }
  std::shared_ptr<const ServingVersion> version;
  if (request.version() == 0) {
    version = follower_->Current();
  } else {
    absl::StatusOr<std::shared_ptr<const ServingVersion>> at =
        follower_->AtStep(request.version(), options_.version_wait);
    if (!at.ok()) return wire::ToGrpcStatus(at.status());
    version = *std::move(at);
  }
  const bool half = request.value_type() == proto::FLOAT16;
  std::vector<float> rows, pooled;
  std::vector<uint64_t> keys;
  uint64_t response_bytes = 0;
  for (int s = 0; s < request.slot_size(); ++s) {
    const proto::LookupSlot& slot = request.slot(s);
    auto table = version->tables.find(slot.table());
    if (table == version->tables.end()) {
      return Refuse(
          grpc::StatusCode::NOT_FOUND,
          absl::StrCat("slot ", s, ": no table '", slot.table(),
                       "' in the version served (step ", version->step, ")"));
    }
    if (!proto::Pooling_IsValid(slot.pooling())) {
      return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                    absl::StrCat("slot ", s, ": unknown pooling ",
                                 slot.pooling(), " (NONE 0, SUM 1, MEAN 2)"));
    }
    if (slot.keys().size() % sizeof(uint64_t) != 0) {
      return Refuse(grpc::StatusCode::INVALID_ARGUMENT,
                    absl::StrCat("slot ", s,
                                 ": keys must be packed "
                                 "little-endian uint64; got ",
                                 slot.keys().size(), " bytes"));
    }
    const size_t n = slot.keys().size() / sizeof(uint64_t);
    keys.resize(n);
    if (n > 0) std::memcpy(keys.data(), slot.keys().data(), slot.keys().size());
    if (options_.num_shards > 1) {
      for (uint64_t key : keys) {
        const int32_t shard = ShardOfKey(key, options_.num_shards);
        if (shard != options_.shard_index) {
          return Refuse(
              grpc::StatusCode::FAILED_PRECONDITION,
              absl::StrCat("slot ", s, ": key ", key,
                           " belongs to serving "
                           "shard ",
                           shard, " of ", options_.num_shards,
                           ", but this is shard ", options_.shard_index));
        }
      }
    }
    absl::StatusOr<std::vector<int32_t>> offsets = Offsets(slot, n, s);
    if (!offsets.ok()) return wire::ToGrpcStatus(offsets.status());
    const size_t dim = table->second->dim();
    // What this slot reads and answers (bags may outnumber keys: empty
    // bags), before any of it is allocated.
    response_bytes += std::max<uint64_t>(n, offsets->size()) * dim *
                      (half ? sizeof(uint16_t) : sizeof(float));
    if (response_bytes > options_.max_response_bytes) {
      return Refuse(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("this Lookup's rows and bags take more than the ",
                       options_.max_response_bytes,
                       " bytes one response may carry (--max_message_bytes) "
                       "by slot ",
                       s, ": split it"));
    }
    rows.resize(n * dim);
    if (absl::Status read = table->second->Read(keys, absl::MakeSpan(rows));
        !read.ok()) {
      return wire::ToGrpcStatus(read);
    }
    const float* out = rows.data();
    size_t out_floats = rows.size();
    if (slot.pooling() != proto::POOLING_NONE) {
      const size_t bags = offsets->size() - 1;
      pooled.assign(bags * dim, 0.0f);
      for (size_t b = 0; b < bags; ++b) {
        float* bag = pooled.data() + b * dim;
        const int32_t begin = (*offsets)[b], end = (*offsets)[b + 1];
        for (int32_t k = begin; k < end; ++k) {
          const float* row = rows.data() + static_cast<size_t>(k) * dim;
          for (size_t d = 0; d < dim; ++d) bag[d] += row[d];
        }
        if (slot.pooling() == proto::POOLING_MEAN && end > begin) {
          const float scale = 1.0f / static_cast<float>(end - begin);
          for (size_t d = 0; d < dim; ++d) bag[d] *= scale;
        }
      }
      out = pooled.data();
      out_floats = pooled.size();
    }
    std::string* values = response->add_values();
    if (half) {
      values->resize(out_floats * sizeof(uint16_t));
      wire::FloatsToHalves(absl::MakeConstSpan(out, out_floats),
                           reinterpret_cast<uint16_t*>(values->data()));
    } else {
      values->assign(reinterpret_cast<const char*>(out),
                     out_floats * sizeof(float));
    }
  }
  response->set_version(version->step);
  return grpc::Status::OK;
}

grpc::Status ServingServiceImpl::Version(
    grpc::ServerContext*, const proto::ServingVersionRequest*,
    proto::ServingVersionResponse* response) {
  return metrics_->Measure(RpcMethod::kServingVersion, [&] {
    *response = follower_->Describe();
    return grpc::Status::OK;
  });
}

grpc::Status ServingServiceImpl::DenseModel(
    grpc::ServerContext*, const proto::DenseModelRequest* request,
    proto::DenseModelResponse* response) {
  std::shared_ptr<const ServingVersion> version;
  if (request->version() == 0) {
    version = follower_->Current();
  } else {
    absl::StatusOr<std::shared_ptr<const ServingVersion>> at =
        follower_->AtStep(request->version(), options_.version_wait);
    if (!at.ok()) return wire::ToGrpcStatus(at.status());
    version = *std::move(at);
  }
  if (version->dense_parameters == nullptr) {
    return Refuse(grpc::StatusCode::FAILED_PRECONDITION,
                  absl::StrCat("version ", version->step,
                               " has no dense model (training publishes it "
                               "with shard 0's publications and checkpoints)"));
  }
  response->set_step(version->dense_step);
  response->set_dense_parameters(*version->dense_parameters);
  return grpc::Status::OK;
}

}  // namespace embedps::server
