// RpcMetrics: calls, errors and a latency histogram per RPC method, and
// the Prometheus text rendering of a StatsResponse (so that the Stats RPC
// and the /metrics page always show the same numbers).
//
// Thread safety: Record and Fill are thread-safe (atomic counters).
#ifndef EMBEDPS_SERVER_RPC_METRICS_H_
#define EMBEDPS_SERVER_RPC_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "embedding/table.h"
#include "proto/stats.pb.h"

namespace embedps::server {

enum class RpcMethod {
  kCreateTable,
  kListTables,
  kPull,
  kPush,
  kStats,
  kSave,
  kAwaitSave,
  kLoad,
  kCoordinationSet,
  kCoordinationGet,
  kCoordinationWait,
  kCoordinationBarrier,
  kPublish,
  kSubscribe,
  kErase,
  kServingLookup,
  kServingVersion,
  kDropTable,
  kReplicaHeartbeat,
  kReplicaReport,
  kReplicaView,
  kReplicationApply,
  kReplicationCatchUp,
  kIdentify,
  kHotKeys,
  kReadRows,
  kWriteRows,
  kCount,  // number of methods
};
const char* RpcMethodName(RpcMethod method);

// Copies every statistic of `stats` into `out` (all but id and name).
void TableStatsToProto(const embedding::TableStats& stats,
                       proto::TableStatsProto* out);

class RpcMetrics {
 public:
  // Latency bucket upper bounds: 50 µs · 2^i, up to ~13 s.
  static constexpr int kBuckets = 19;
  static double BucketBound(int bucket);

  void Record(RpcMethod method, bool ok, absl::Duration latency);

  // Appends one RpcStats per method and the bucket bounds to `stats`.
  void Fill(proto::StatsResponse* stats) const;

  // Runs `handler` (returning grpc::Status or absl::Status) and records
  // its latency and outcome under `method`.
  template <typename Handler>
  auto Measure(RpcMethod method, Handler&& handler) {
    Timer timer(this, method);
    auto status = handler();
    timer.set_ok(status.ok());
    return status;
  }

  // Records the call's latency and outcome when it goes out of scope.
  class Timer {
   public:
    Timer(RpcMetrics* metrics, RpcMethod method)
        : metrics_(metrics), method_(method), start_(absl::Now()) {}
    ~Timer() { metrics_->Record(method_, ok_, absl::Now() - start_); }
    void set_ok(bool ok) { ok_ = ok; }

   private:
    RpcMetrics* const metrics_;
    const RpcMethod method_;
    const absl::Time start_;
    bool ok_ = false;
  };

 private:
  struct PerMethod {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> latency_nanos{0};
    std::array<std::atomic<uint64_t>, kBuckets + 1> buckets{};
  };
  std::array<PerMethod, static_cast<size_t>(RpcMethod::kCount)> methods_;
};

// The Prometheus text exposition (format 0.0.4) of `stats`: RPC counters
// and histograms, per-table rows, bytes and key counters, rejections.
std::string RenderPrometheus(const proto::StatsResponse& stats);

}  // namespace embedps::server

#endif  // EMBEDPS_SERVER_RPC_METRICS_H_
