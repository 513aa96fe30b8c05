#include "server/rpc_metrics.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::testing::HasSubstr;

TEST(RpcMetricsTest, RecordsCallsErrorsAndBuckets) {
  RpcMetrics metrics;
  metrics.Record(RpcMethod::kPull, true, absl::Microseconds(10));  // bucket 0
  metrics.Record(RpcMethod::kPull, false,
                 absl::Microseconds(120));  // 50·2^2=200µs
  {
    RpcMetrics::Timer t(&metrics, RpcMethod::kPush);
    t.set_ok(true);
  }
  proto::StatsResponse stats;
  metrics.Fill(&stats);
  ASSERT_EQ(stats.latency_bucket_bounds_seconds_size(), RpcMetrics::kBuckets);
  const proto::RpcStats* pull = nullptr;
  for (const auto& r : stats.rpc()) {
    if (r.method() == "Pull") pull = &r;
  }
  ASSERT_NE(pull, nullptr);
  EXPECT_EQ(pull->calls(), 2u);
  EXPECT_EQ(pull->errors(), 1u);
  EXPECT_EQ(pull->latency_bucket_calls(0), 1u);
  EXPECT_EQ(pull->latency_bucket_calls(2), 1u);
  EXPECT_NEAR(pull->latency_seconds_sum(), 130e-6, 1e-9);
}

TEST(RpcMetricsTest, RendersPrometheusText) {
  RpcMetrics metrics;
  metrics.Record(RpcMethod::kPull, true, absl::Microseconds(10));
  metrics.Record(RpcMethod::kPull, true,
                 absl::Seconds(100));  // beyond all bounds
  proto::StatsResponse stats;
  stats.set_shard_index(1);
  stats.set_num_shards(2);
  metrics.Fill(&stats);
  proto::TableStatsProto* t = stats.add_table();
  t->set_name("users");
  t->set_rows(42);
  t->set_pulled_keys(7);
  (*stats.mutable_rejected_requests())["wrong_shard"] = 3;
  const std::string text = RenderPrometheus(stats);
  EXPECT_THAT(
      text, HasSubstr("embedps_shard_info{shard=\"1\",num_shards=\"2\"} 1\n"));
  EXPECT_THAT(text,
              HasSubstr("# TYPE embedps_rpc_latency_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("embedps_rpc_calls_total{method=\"Pull\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("embedps_rpc_latency_seconds_bucket{method="
                              "\"Pull\",le=\"5e-05\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("embedps_rpc_latency_seconds_bucket{method="
                              "\"Pull\",le=\"+Inf\"} 2\n"));
  EXPECT_THAT(
      text,
      HasSubstr("embedps_rpc_latency_seconds_count{method=\"Pull\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("embedps_table_rows{table=\"users\"} 42\n"));
  EXPECT_THAT(text,
              HasSubstr("embedps_keys_pulled_total{table=\"users\"} 7\n"));
  EXPECT_THAT(
      text,
      HasSubstr("embedps_rejected_requests_total{reason=\"wrong_shard\"} 3\n"));
}

}  // namespace
}  // namespace embedps::server
