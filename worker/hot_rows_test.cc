#include "worker/hot_rows.h"

#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "dense/collective/gloo_communicator.h"
#include "dense/collective/in_memory_store.h"
#include "embedding/optimizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::worker {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;

embedding::TableSpec AdamSpec(const std::string& name) {
  embedding::TableSpec spec;
  spec.name = name;
  spec.dim = kDim;
  spec.seed = 3;
  spec.optimizer.kind = embedding::OptimizerSpec::Kind::kAdam;
  spec.optimizer.learning_rate = 0.01f;
  return spec;
}

// Records of `keys` as a server would hold them: random floats.
std::vector<char> RandomRecords(const embedding::TableSpec& spec, size_t keys,
                                uint32_t seed) {
  const size_t floats =
      spec.dim + embedding::OptimizerStateFloats(spec.optimizer, spec.dim);
  std::vector<float> values(keys * (2 + floats));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (size_t i = 0; i < keys; ++i) {
    for (size_t f = 0; f < floats; ++f)
      values[i * (2 + floats) + 2 + f] = u(rng);
  }
  std::vector<char> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// The access count of record `i` of `records` (floats, records of
// `record_floats`), and the same records with their counts zeroed.
uint32_t CountOf(const std::vector<float>& records, size_t record_floats,
                 size_t i) {
  uint32_t count;
  std::memcpy(&count, records.data() + i * record_floats + 1, sizeof(count));
  return count;
}
std::vector<float> WithoutCounts(std::vector<float> records,
                                 size_t record_floats) {
  for (size_t i = 1; i < records.size(); i += record_floats) records[i] = 0;
  return records;
}

// Runs work(rank, communicator) on two Gloo workers, each on a thread.
void OnTwoWorkers(const std::function<void(int, dense::Communicator*)>& work) {
  dense::InMemoryStore store;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      dense::GlooOptions options;
      options.rank = rank;
      options.world_size = 2;
      auto communicator = dense::CreateGlooCommunicator(options, &store);
      ASSERT_OK(communicator);
      work(rank, communicator->get());
    });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(HotRowsTest, SplitMovesHotKeysBehindTheOthersInOrder) {
  HotRows hot({AdamSpec("a")});
  ASSERT_OK(hot.Assign(0, {50, 10, 30}, RandomRecords(AdamSpec("a"), 3, 1)));
  std::vector<uint64_t> unique = {1, 30, 2, 50, 3, 4};
  const std::vector<uint64_t> before = unique;
  std::vector<int32_t> remap, slots;
  EXPECT_EQ(hot.Split(0, unique, remap, slots), 4u);
  EXPECT_EQ(unique, (std::vector<uint64_t>{1, 2, 3, 4, 30, 50}));
  EXPECT_EQ(slots, (std::vector<int32_t>{2, 0}));
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_EQ(unique[remap[i]], before[i]);
  }
  // No hot key: nothing moves.
  std::vector<uint64_t> cold = {7, 8};
  EXPECT_EQ(hot.Split(0, cold, remap, slots), 2u);
  EXPECT_TRUE(remap.empty());
  EXPECT_TRUE(slots.empty());
}

TEST(HotRowsTest, ApplyIsTheServersOptimizerOnTheRecord) {
  const embedding::TableSpec spec = AdamSpec("a");
  HotRows hot({spec});
  std::vector<char> records = RandomRecords(spec, 3, 2);
  ASSERT_OK(hot.Assign(0, {5, 6, 7}, records));
  const std::vector<int32_t> slots = {2, 0};
  std::vector<float> grads = {1, 2, 3, 4, -1, -2, -3, -4};
  std::vector<absl::Span<const int32_t>> all_slots = {slots};
  std::vector<absl::Span<const float>> all_grads = {grads};
  ASSERT_OK(hot.Apply(all_slots, all_grads, nullptr));

  auto optimizer = embedding::RowOptimizer::Create(spec.optimizer, kDim);
  const size_t record_floats = records.size() / 3 / sizeof(float);
  std::vector<float> expected(records.size() / sizeof(float));
  std::memcpy(expected.data(), records.data(), records.size());
  for (size_t j = 0; j < slots.size(); ++j) {
    float* row = expected.data() + slots[j] * record_floats + 2;
    optimizer->Apply(row, row + kDim, grads.data() + j * kDim);
  }
  std::vector<float> got(expected.size());
  std::memcpy(got.data(), hot.records(0).data(), hot.records(0).size());
  EXPECT_EQ(WithoutCounts(got, record_floats), expected);
  // Each touched row counts the use (what its Pull would have counted).
  EXPECT_EQ(CountOf(got, record_floats, 0), 1u);
  EXPECT_EQ(CountOf(got, record_floats, 1), 0u);
  EXPECT_EQ(CountOf(got, record_floats, 2), 1u);
  // What a write-back sends: the used rows (keys 5 and 7), whole.
  std::vector<uint64_t> used_keys;
  std::vector<char> used;
  hot.UsedRecords(0, used_keys, used);
  EXPECT_EQ(used_keys, (std::vector<uint64_t>{5, 7}));
  const size_t record_bytes = record_floats * sizeof(float);
  ASSERT_EQ(used.size(), 2 * record_bytes);
  EXPECT_EQ(std::memcmp(used.data(), hot.records(0).data(), record_bytes), 0);
  EXPECT_EQ(std::memcmp(used.data() + record_bytes,
                        hot.records(0).data() + 2 * record_bytes, record_bytes),
            0);
  hot.ClearCounts(0);
  hot.UsedRecords(0, used_keys, used);
  EXPECT_TRUE(used_keys.empty());
  EXPECT_TRUE(used.empty());
  std::memcpy(got.data(), hot.records(0).data(), hot.records(0).size());
  EXPECT_EQ(CountOf(got, record_floats, 0), 0u);
  std::vector<float> rows(2 * kDim);
  hot.Gather(0, {{1, 2}}, absl::MakeSpan(rows));
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(rows[d], expected[1 * record_floats + 2 + d]);
    EXPECT_EQ(rows[kDim + d], expected[2 * record_floats + 2 + d]);
  }
}

// Large steps spread over threads: the same rows as on one.
TEST(HotRowsTest, ThreadsChangeNothing) {
  const embedding::TableSpec a = AdamSpec("a"), b = AdamSpec("b");
  const size_t rows = 20000;
  std::vector<uint64_t> keys(rows);
  for (size_t i = 0; i < rows; ++i) keys[i] = i * 3 + 1;
  std::vector<std::vector<float>> results;
  for (int threads : {1, 3}) {
    HotRows hot({a, b}, threads);
    ASSERT_OK(hot.Assign(0, keys, RandomRecords(a, rows, 5)));
    ASSERT_OK(hot.Assign(1, {keys.begin(), keys.begin() + 7},
                         RandomRecords(b, 7, 6)));
    std::vector<int32_t> slots0, slots1 = {6, 2};
    for (size_t i = 0; i < rows; i += 2) slots0.push_back(i);
    std::vector<float> grads0(slots0.size() * kDim), grads1(2 * kDim, 0.5f);
    for (size_t i = 0; i < grads0.size(); ++i) grads0[i] = 0.001f * (i % 97);
    std::vector<absl::Span<const int32_t>> s = {slots0, slots1};
    std::vector<absl::Span<const float>> g = {grads0, grads1};
    ASSERT_OK(hot.Apply(s, g, nullptr));
    std::vector<float> gathered(slots0.size() * kDim);
    hot.Gather(0, slots0, absl::MakeSpan(gathered));
    std::vector<float> all(hot.records(0).size() / sizeof(float) +
                           hot.records(1).size() / sizeof(float));
    std::memcpy(all.data(), hot.records(0).data(), hot.records(0).size());
    std::memcpy(all.data() + hot.records(0).size() / sizeof(float),
                hot.records(1).data(), hot.records(1).size());
    all.insert(all.end(), gathered.begin(), gathered.end());
    results.push_back(std::move(all));
  }
  EXPECT_EQ(results[0], results[1]);
}

// Two workers touch different rows of the tier with different gradients:
// both end with the rows one worker would have with the summed gradients,
// and a row neither touched gets no update (Adam's step count stays).
TEST(HotRowsTest, SeveralWorkersApplyTheSumAndStayEqual) {
  const embedding::TableSpec spec = AdamSpec("a");
  const std::vector<char> records = RandomRecords(spec, 4, 3);
  const std::vector<uint64_t> keys = {11, 12, 13, 14};
  // Worker 0 touches slots 0 and 1, worker 1 slots 1 and 3.
  const std::vector<std::vector<int32_t>> slots = {{0, 1}, {3, 1}};
  const std::vector<std::vector<float>> grads = {
      {1, 1, 1, 1, 0.5f, 0.5f, 0.5f, 0.5f}, {2, 2, 2, 2, 0.25f, 0, 0, 1}};
  std::vector<std::vector<float>> results(2);
  OnTwoWorkers([&](int rank, dense::Communicator* communicator) {
    HotRows hot({spec});
    ASSERT_OK(hot.Assign(0, keys, records));
    std::vector<absl::Span<const int32_t>> s = {slots[rank]};
    std::vector<absl::Span<const float>> g = {grads[rank]};
    ASSERT_OK(hot.Apply(s, g, communicator));
    results[rank].resize(hot.records(0).size() / sizeof(float));
    std::memcpy(results[rank].data(), hot.records(0).data(),
                hot.records(0).size());
  });
  EXPECT_EQ(results[0], results[1]);

  HotRows alone({spec});
  ASSERT_OK(alone.Assign(0, keys, records));
  const std::vector<int32_t> all_slots = {0, 1, 3};
  const std::vector<float> sums = {1,    1,    1, 1, 0.75f, 0.5f,
                                   0.5f, 1.5f, 2, 2, 2,     2};
  std::vector<absl::Span<const int32_t>> s = {all_slots};
  std::vector<absl::Span<const float>> g = {sums};
  ASSERT_OK(alone.Apply(s, g, nullptr));
  std::vector<float> expected(results[0].size());
  std::memcpy(expected.data(), alone.records(0).data(),
              alone.records(0).size());
  const size_t record_floats = expected.size() / 4;
  EXPECT_EQ(WithoutCounts(results[0], record_floats),
            WithoutCounts(expected, record_floats));
  // Slot 1 was used by both workers.
  EXPECT_EQ(CountOf(results[0], record_floats, 1), 2u);
  EXPECT_EQ(CountOf(results[0], record_floats, 0), 1u);
  std::vector<float> original(expected.size());
  std::memcpy(original.data(), records.data(), records.size());
  EXPECT_TRUE(std::equal(original.begin() + 2 * record_floats,
                         original.begin() + 3 * record_floats,
                         results[0].begin() + 2 * record_floats))
      << "slot 2: untouched";
}

// Workers touching different numbers of rows (one none) exchange padded
// lists and still agree; a worker whose tier holds fewer rows than another
// updated says the tiers differ.
TEST(HotRowsTest, UnevenTouchesAgreeAndDifferentTiersAreAnError) {
  const embedding::TableSpec spec = AdamSpec("a");
  const std::vector<char> records = RandomRecords(spec, 4, 5);
  const std::vector<uint64_t> keys = {21, 22, 23, 24};
  const auto run = [&](const std::vector<size_t>& tier_rows,
                       const std::vector<std::vector<int32_t>>& slots,
                       std::vector<std::vector<float>>& results,
                       std::vector<absl::Status>& statuses) {
    OnTwoWorkers([&](int rank, dense::Communicator* communicator) {
      HotRows hot({spec});
      const size_t n = tier_rows[rank];
      const size_t record_bytes = records.size() / keys.size();
      ASSERT_OK(hot.Assign(
          0, std::vector<uint64_t>(keys.begin(), keys.begin() + n),
          absl::MakeConstSpan(records).subspan(0, n * record_bytes)));
      const std::vector<float> grads(slots[rank].size() * kDim, 0.5f);
      std::vector<absl::Span<const int32_t>> s = {slots[rank]};
      std::vector<absl::Span<const float>> g = {grads};
      statuses[rank] = hot.Apply(s, g, communicator);
      results[rank].resize(hot.records(0).size() / sizeof(float));
      std::memcpy(results[rank].data(), hot.records(0).data(),
                  hot.records(0).size());
    });
  };
  std::vector<std::vector<float>> results(2);
  std::vector<absl::Status> statuses(2);
  run({4, 4}, {{0, 2, 3}, {}}, results, statuses);
  ASSERT_OK(statuses[0]);
  ASSERT_OK(statuses[1]);
  EXPECT_EQ(results[0], results[1]);
  const size_t record_floats = results[0].size() / 4;
  EXPECT_EQ(CountOf(results[0], record_floats, 0), 1u);
  EXPECT_EQ(CountOf(results[0], record_floats, 1), 0u);
  EXPECT_EQ(CountOf(results[0], record_floats, 3), 1u);

  run({4, 2}, {{3}, {1}}, results, statuses);
  EXPECT_OK(statuses[0]);
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kInternal,
                                    HasSubstr("the workers' tiers differ")));
}

TEST(HotRowsTest, BadRowsAreRefusedAndChangeNothing) {
  const embedding::TableSpec spec = AdamSpec("a");
  HotRows hot({spec});
  const std::vector<char> records = RandomRecords(spec, 2, 4);
  ASSERT_OK(hot.Assign(0, {1, 2}, records));
  EXPECT_THAT(hot.Assign(0, {1, 2, 3}, records),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bytes")));
  EXPECT_THAT(
      hot.Assign(0, {1, 1}, records),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 1 repeats")));
  std::vector<char> nan_records = records;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_records.data() + nan_records.size() - 4, &nan, 4);
  EXPECT_THAT(hot.Assign(0, {1, 2}, nan_records),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key 2")));
  EXPECT_EQ(std::vector<uint64_t>(hot.keys(0).begin(), hot.keys(0).end()),
            (std::vector<uint64_t>{1, 2}));
  EXPECT_TRUE(
      std::equal(records.begin(), records.end(), hot.records(0).begin()));
}

}  // namespace
}  // namespace embedps::worker
