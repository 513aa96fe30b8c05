// ExpirySweeper: rows untouched past their table's TTL go, on the
// sweeper's own schedule, while Pulls and Pushes of other keys go on;
// tables without a TTL are left alone.
#include "server/expiry_sweeper.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

proto::TableConfig Config(const std::string& name, uint64_t ttl_steps) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(4);
  config.set_num_stripes(8);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  config.mutable_eviction()->set_ttl(ttl_steps);
  return config;
}

TEST(ExpirySweeperTest, RemovesExpiredRowsOnItsScheduleWhileTrainingGoesOn) {
  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto with_ttl, registry.Create(Config("ttl", 5)));
  ASSERT_OK_AND_ASSIGN(auto without, registry.Create(Config("kept", 0)));
  ASSERT_OK_AND_ASSIGN(auto ttl, registry.Find(with_ttl.table_id));
  ASSERT_OK_AND_ASSIGN(auto kept, registry.Find(without.table_id));
  std::vector<uint64_t> old_keys(1000);
  for (uint64_t i = 0; i < old_keys.size(); ++i) old_keys[i] = i;
  std::vector<float> rows(old_keys.size() * 4);
  for (const auto& entry : {ttl, kept}) {
    ASSERT_OK(entry.table->Pull(old_keys, absl::MakeSpan(rows),
                                embedding::AccessContext{1}));
  }

  ExpirySweeper sweeper(&registry, absl::Milliseconds(20));
  // Training moves on to step 100 with other keys.
  std::atomic<bool> training{true};
  std::thread trainer([&] {
    std::vector<uint64_t> fresh = {5000, 5001, 5002};
    std::vector<float> values(fresh.size() * 4), grads(fresh.size() * 4, 0.1f);
    for (uint64_t step = 2; training.load(); ++step) {
      const uint64_t at = std::min<uint64_t>(step, 100);
      EXPECT_OK(ttl.table->Pull(fresh, absl::MakeSpan(values),
                                embedding::AccessContext{at}));
      EXPECT_OK(ttl.table->Push(fresh, grads, embedding::AccessContext{at}));
    }
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (ttl.table->Stats().rows > 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  training = false;
  trainer.join();
  EXPECT_EQ(ttl.table->Stats().rows, 3u) << "only the keys still in use";
  EXPECT_EQ(ttl.table->Stats().evicted, old_keys.size());
  EXPECT_EQ(kept.table->Stats().rows, old_keys.size()) << "no TTL: kept";
  EXPECT_GT(sweeper.sweeps(), 0u);
  ASSERT_OK_AND_ASSIGN(const uint64_t again, sweeper.SweepOnce());
  EXPECT_EQ(again, 0u);
}

// A table with max_rows and no TTL is swept too: new ids arriving in
// waves (a drifting vocabulary) leave it at its cap.
TEST(ExpirySweeperTest, HoldsATableAtItsCapWhileIdsDrift) {
  TableRegistry registry;
  proto::TableConfig config = Config("capped", 0);
  config.mutable_eviction()->set_max_rows(500);
  ASSERT_OK_AND_ASSIGN(auto created, registry.Create(config));
  ASSERT_OK_AND_ASSIGN(auto capped, registry.Find(created.table_id));
  ExpirySweeper sweeper(&registry, absl::ZeroDuration());
  std::vector<float> rows(400 * 4);
  for (uint64_t wave = 0; wave < 10; ++wave) {
    std::vector<uint64_t> keys(400);
    for (uint64_t i = 0; i < keys.size(); ++i) keys[i] = wave * 1000 + i;
    ASSERT_OK(capped.table->Pull(keys, absl::MakeSpan(rows),
                                 embedding::AccessContext{wave + 1}));
    ASSERT_OK(sweeper.SweepOnce().status());
    EXPECT_LE(capped.table->Stats().rows, 500u) << "wave " << wave;
  }
  EXPECT_EQ(capped.table->Stats().rows, 500u);
  EXPECT_EQ(capped.table->Stats().evicted, 10 * 400u - 500u);
}

}  // namespace
}  // namespace embedps::server
