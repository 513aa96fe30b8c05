#include "server/rpc_metrics.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "embedding/table.h"

namespace embedps::server {

void TableStatsToProto(const embedding::TableStats& s,
                       proto::TableStatsProto* out) {
#define EMBEDPS_COPY_TABLE_STAT(field, type, metric, help) \
  out->set_##field(s.field);
  EMBEDPS_TABLE_STATS_FIELDS(EMBEDPS_COPY_TABLE_STAT)
#undef EMBEDPS_COPY_TABLE_STAT
  out->set_over_budget(s.over_budget);
  out->set_spill_multiget_seconds(s.spill_multiget_micros * 1e-6);
}

const char* RpcMethodName(RpcMethod method) {
  switch (method) {
    case RpcMethod::kCreateTable:
      return "CreateTable";
    case RpcMethod::kListTables:
      return "ListTables";
    case RpcMethod::kPull:
      return "Pull";
    case RpcMethod::kPush:
      return "Push";
    case RpcMethod::kStats:
      return "Stats";
    case RpcMethod::kSave:
      return "Save";
    case RpcMethod::kAwaitSave:
      return "AwaitSave";
    case RpcMethod::kLoad:
      return "Load";
    case RpcMethod::kCoordinationSet:
      return "Coordination.Set";
    case RpcMethod::kCoordinationGet:
      return "Coordination.Get";
    case RpcMethod::kCoordinationWait:
      return "Coordination.Wait";
    case RpcMethod::kCoordinationBarrier:
      return "Coordination.Barrier";
    case RpcMethod::kPublish:
      return "Publish";
    case RpcMethod::kErase:
      return "Erase";
    case RpcMethod::kHotKeys:
      return "HotKeys";
    case RpcMethod::kReadRows:
      return "ReadRows";
    case RpcMethod::kWriteRows:
      return "WriteRows";
    case RpcMethod::kSubscribe:
      return "Subscribe";
    case RpcMethod::kServingLookup:
      return "Serving.Lookup";
    case RpcMethod::kServingVersion:
      return "Serving.Version";
    case RpcMethod::kDropTable:
      return "DropTable";
    case RpcMethod::kReplicaHeartbeat:
      return "ReplicaHeartbeat";
    case RpcMethod::kReplicaReport:
      return "ReplicaReport";
    case RpcMethod::kReplicaView:
      return "ReplicaView";
    case RpcMethod::kReplicationApply:
      return "ReplicationApply";
    case RpcMethod::kReplicationCatchUp:
      return "ReplicationCatchUp";
    case RpcMethod::kIdentify:
      return "Identify";
    case RpcMethod::kCount:
      break;
  }
  return "unknown";
}

double RpcMetrics::BucketBound(int bucket) {
  return 50e-6 * std::ldexp(1.0, bucket);
}

void RpcMetrics::Record(RpcMethod method, bool ok, absl::Duration latency) {
  PerMethod& m = methods_[static_cast<size_t>(method)];
  m.calls.fetch_add(1, std::memory_order_relaxed);
  if (!ok) m.errors.fetch_add(1, std::memory_order_relaxed);
  m.latency_nanos.fetch_add(
      static_cast<uint64_t>(absl::ToInt64Nanoseconds(latency)),
      std::memory_order_relaxed);
  const double seconds = absl::ToDoubleSeconds(latency);
  int bucket = 0;
  while (bucket < kBuckets && seconds > BucketBound(bucket)) ++bucket;
  m.buckets[bucket].fetch_add(1, std::memory_order_relaxed);
}

void RpcMetrics::Fill(proto::StatsResponse* stats) const {
  for (int b = 0; b < kBuckets; ++b)
    stats->add_latency_bucket_bounds_seconds(BucketBound(b));
  for (size_t i = 0; i < methods_.size(); ++i) {
    const PerMethod& m = methods_[i];
    proto::RpcStats* out = stats->add_rpc();
    out->set_method(RpcMethodName(static_cast<RpcMethod>(i)));
    out->set_calls(m.calls.load(std::memory_order_relaxed));
    out->set_errors(m.errors.load(std::memory_order_relaxed));
    out->set_latency_seconds_sum(
        m.latency_nanos.load(std::memory_order_relaxed) * 1e-9);
    for (const auto& b : m.buckets)
      out->add_latency_bucket_calls(b.load(std::memory_order_relaxed));
  }
}

namespace {

void Metric(std::string& out, absl::string_view name, absl::string_view type,
            absl::string_view help) {
  absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                  type, "\n");
}

// Label values are table names (validated: [A-Za-z0-9_./-]) and fixed
// method/reason names, so no escaping is needed.
std::string Label(absl::string_view key, absl::string_view value) {
  return absl::StrCat("{", key, "=\"", value, "\"}");
}

}  // namespace

std::string RenderPrometheus(const proto::StatsResponse& stats) {
  std::string out;
  const std::string shard = absl::StrCat(stats.shard_index());
  Metric(out, "embedps_shard_info", "gauge",
         "This server's shard index and shard count.");
  absl::StrAppend(&out, "embedps_shard_info{shard=\"", shard,
                  "\",num_shards=\"", stats.num_shards(), "\"} 1\n");

  Metric(out, "embedps_rpc_calls_total", "counter", "RPCs handled, by method.");
  for (const auto& r : stats.rpc()) {
    absl::StrAppend(&out, "embedps_rpc_calls_total",
                    Label("method", r.method()), " ", r.calls(), "\n");
  }
  Metric(out, "embedps_rpc_errors_total", "counter",
         "RPCs that ended with a status other than OK, by method.");
  for (const auto& r : stats.rpc()) {
    absl::StrAppend(&out, "embedps_rpc_errors_total",
                    Label("method", r.method()), " ", r.errors(), "\n");
  }
  Metric(out, "embedps_rpc_latency_seconds", "histogram",
         "Time from receiving an RPC to answering it, by method.");
  for (const auto& r : stats.rpc()) {
    uint64_t cumulative = 0;
    for (int b = 0; b < r.latency_bucket_calls_size(); ++b) {
      cumulative += r.latency_bucket_calls(b);
      const std::string le =
          b < stats.latency_bucket_bounds_seconds_size()
              ? absl::StrFormat("%g", stats.latency_bucket_bounds_seconds(b))
              : "+Inf";
      absl::StrAppend(&out, "embedps_rpc_latency_seconds_bucket{method=\"",
                      r.method(), "\",le=\"", le, "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "embedps_rpc_latency_seconds_sum",
                    Label("method", r.method()), " ",
                    absl::StrFormat("%.9g", r.latency_seconds_sum()), "\n");
    absl::StrAppend(&out, "embedps_rpc_latency_seconds_count",
                    Label("method", r.method()), " ", r.calls(), "\n");
  }

  struct TableMetric {
    const char* name;
    const char* type;
    const char* help;
    uint64_t (proto::TableStatsProto::*get)() const;
  };
  const TableMetric table_metrics[] = {
#define EMBEDPS_TABLE_METRIC(field, type, metric, help) \
  {metric, type, help, &proto::TableStatsProto::field},
      EMBEDPS_TABLE_STATS_FIELDS(EMBEDPS_TABLE_METRIC)
#undef EMBEDPS_TABLE_METRIC
  };
  for (const TableMetric& m : table_metrics) {
    Metric(out, m.name, m.type, m.help);
    for (const auto& t : stats.table()) {
      absl::StrAppend(&out, m.name, Label("table", t.name()), " ", (t.*m.get)(),
                      "\n");
    }
  }
  Metric(out, "embedps_spill_multiget_seconds_total", "counter",
         "Time in batched reads of the spill tier.");
  for (const auto& t : stats.table()) {
    absl::StrAppend(&out, "embedps_spill_multiget_seconds_total",
                    Label("table", t.name()), " ", t.spill_multiget_seconds(),
                    "\n");
  }
  Metric(out, "embedps_rejected_requests_total", "counter",
         "Requests refused for bad input or limits, by reason.");
  for (const auto& [reason, count] : stats.rejected_requests()) {
    absl::StrAppend(&out, "embedps_rejected_requests_total",
                    Label("reason", reason), " ", count, "\n");
  }
  if (stats.serving_replica()) {
    const proto::ServingVersionResponse& v = stats.serving();
    const double age =
        v.published_unix_micros() == 0
            ? 0.0
            : (absl::ToUnixMicros(absl::Now()) - v.published_unix_micros()) *
                  1e-6;
    const struct {
      const char* name;
      const char* type;
      const char* help;
      double value;
    } serving[] = {
        {"embedps_serving_version_step", "gauge",
         "Training step of the version this replica serves.",
         static_cast<double>(v.step())},
        {"embedps_serving_version_age_seconds", "gauge",
         "Seconds since training published the version served (0: a "
         "checkpoint alone).",
         age},
        {"embedps_serving_base_step", "gauge",
         "Step of the checkpoint the replica's base was restored from.",
         static_cast<double>(v.base_step())},
        {"embedps_serving_publications_applied_total", "counter",
         "Publications of training applied.",
         static_cast<double>(v.publications_applied())},
        {"embedps_serving_checkpoints_loaded_total", "counter",
         "Checkpoints restored as the base.",
         static_cast<double>(v.checkpoints_loaded())},
        {"embedps_serving_following", "gauge",
         "1 while the replica follows training without error (0: it waits "
         "for a checkpoint, or one failed to load; see Version).",
         v.last_error().empty() ? 1.0 : 0.0},
    };
    for (const auto& m : serving) {
      Metric(out, m.name, m.type, m.help);
      absl::StrAppend(&out, m.name, " ", m.value, "\n");
    }
  }
  Metric(out, "embedps_duplicate_pushes_total", "counter",
         "Retried pushes acknowledged without applying them again.");
  absl::StrAppend(&out, "embedps_duplicate_pushes_total ",
                  stats.duplicate_pushes(), "\n");
  Metric(out, "embedps_resident_bytes", "gauge",
         "Resident memory of the process.");
  absl::StrAppend(&out, "embedps_resident_bytes ", stats.resident_bytes(),
                  "\n");
  Metric(out, "embedps_memory_limit_bytes", "gauge",
         "Resident memory past which calls that would allocate are refused "
         "(0: no limit).");
  absl::StrAppend(&out, "embedps_memory_limit_bytes ",
                  stats.memory_limit_bytes(), "\n");
  Metric(out, "embedps_open_descriptors", "gauge",
         "File descriptors the process has open.");
  absl::StrAppend(&out, "embedps_open_descriptors ", stats.open_descriptors(),
                  "\n");
  Metric(out, "embedps_descriptor_limit", "gauge",
         "The process's limit of open file descriptors.");
  absl::StrAppend(&out, "embedps_descriptor_limit ", stats.descriptor_limit(),
                  "\n");
  Metric(out, "embedps_connections_shed_total", "counter",
         "Connections closed at once: they would have taken the process "
         "past its descriptor limit less a reserve.");
  absl::StrAppend(&out, "embedps_connections_shed_total ",
                  stats.connections_shed(), "\n");
  return out;
}

}  // namespace embedps::server
