#include "server/publisher.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kDim = 4;

proto::TableConfig SgdTable(const std::string& name) {
  proto::TableConfig config;
  config.set_name(name);
  config.set_dim(kDim);
  config.mutable_initializer()->set_kind(proto::InitializerConfig::ZEROS);
  config.mutable_optimizer()->set_kind(proto::OptimizerConfig::SGD);
  config.mutable_optimizer()->set_learning_rate(1.0f);
  return config;
}

std::vector<uint64_t> Keys(const std::string& bytes) {
  std::vector<uint64_t> keys(bytes.size() / 8);
  std::memcpy(keys.data(), bytes.data(), bytes.size());
  return keys;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / 4);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

TEST(PublisherTest, PublishesTheRowsChangedSinceTheLastPublication) {
  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto created, registry.Create(SgdTable("t")));
  ASSERT_OK_AND_ASSIGN(TableRegistry::Entry entry,
                       registry.Find(created.table_id));
  Publisher publisher({}, &registry);

  // The first publication turns the change log on and holds every row, so
  // that it follows a checkpoint of any step (previous_step 0).
  const std::vector<float> grad(kDim, 1.0f);
  ASSERT_OK(entry.table->Push({5}, grad));  // creates the row
  std::vector<float> row(kDim);
  proto::PublishRequest request;
  request.set_step(0);
  ASSERT_OK_AND_ASSIGN(proto::PublishResponse first,
                       publisher.Publish(request));
  EXPECT_EQ(first.sequence(), 1u);
  EXPECT_EQ(first.rows(), 1u);

  ASSERT_OK(entry.table->Push({5}, grad));
  ASSERT_OK(entry.table->Pull({9}, absl::MakeSpan(row)));  // created
  ASSERT_OK_AND_ASSIGN(uint64_t erased, entry.table->Erase({9}));
  ASSERT_EQ(erased, 1u);
  request.set_step(3);
  request.set_dense_parameters("dense bytes");
  ASSERT_OK_AND_ASSIGN(proto::PublishResponse second,
                       publisher.Publish(request));
  EXPECT_EQ(second.sequence(), 2u);
  EXPECT_EQ(second.rows(), 2u);

  ASSERT_OK_AND_ASSIGN(auto after_first,
                       publisher.After(publisher.id(), 1, absl::Now()));
  ASSERT_EQ(after_first.size(), 1u);
  const proto::Publication& p = *after_first[0];
  EXPECT_EQ(p.sequence(), 2u);
  EXPECT_EQ(p.step(), 3u);
  EXPECT_EQ(p.dense_parameters(), "dense bytes");
  ASSERT_EQ(p.table_size(), 1);
  EXPECT_EQ(p.table(0).config().name(), "t");
  EXPECT_THAT(Keys(p.table(0).keys()), ElementsAre(5));
  EXPECT_THAT(Floats(p.table(0).values()), ElementsAre(-2, -2, -2, -2));
  EXPECT_THAT(Keys(p.table(0).removed()), ElementsAre(9));

  // A fresh subscriber gets everything held; nothing new: an empty answer
  // at the deadline.
  ASSERT_OK_AND_ASSIGN(auto all, publisher.After(0, 0, absl::Now()));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->previous_step(), 0u);
  EXPECT_THAT(Keys(all[0]->table(0).keys()), ElementsAre(5));
  EXPECT_EQ(all[1]->previous_step(), 0u);  // the first's step
  ASSERT_OK_AND_ASSIGN(
      auto none,
      publisher.After(publisher.id(), 2, absl::Now() + absl::Milliseconds(20)));
  EXPECT_TRUE(none.empty());
}

TEST(PublisherTest, AWaitingSubscriberWakesForANewPublication) {
  TableRegistry registry;
  ASSERT_OK(registry.Create(SgdTable("t")).status());
  Publisher publisher({}, &registry);
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(50));
    ASSERT_OK(publisher.Publish(proto::PublishRequest()).status());
  });
  ASSERT_OK_AND_ASSIGN(auto got,
                       publisher.After(0, 0, absl::Now() + absl::Seconds(30)));
  later.join();
  EXPECT_EQ(got.size(), 1u);
  publisher.Close();
  EXPECT_THAT(publisher.After(publisher.id(), 1, absl::InfiniteFuture()),
              StatusIs(absl::StatusCode::kCancelled));
}

// A fresh subscriber that holds a checkpoint's step is sent only the
// publications of later steps; the first still names its previous step.
// With none newer yet it waits (and then gets none) rather than returning
// at once.
TEST(PublisherTest, AFreshSubscriberSkipsTheStepsItHolds) {
  TableRegistry registry;
  ASSERT_OK(registry.Create(SgdTable("t")).status());
  Publisher publisher({}, &registry);
  for (uint64_t step : {10, 20, 30}) {
    proto::PublishRequest request;
    request.set_step(step);
    ASSERT_OK(publisher.Publish(request).status());
  }
  ASSERT_OK_AND_ASSIGN(auto newer, publisher.After(0, 0, absl::Now(), 20));
  ASSERT_EQ(newer.size(), 1u);
  EXPECT_EQ(newer[0]->step(), 30u);
  EXPECT_EQ(newer[0]->previous_step(), 20u);
  ASSERT_OK_AND_ASSIGN(auto all, publisher.After(0, 0, absl::Now(), 0));
  EXPECT_EQ(all.size(), 3u);
  // A subscriber that knows its publisher goes by sequence alone.
  ASSERT_OK_AND_ASSIGN(auto by_sequence,
                       publisher.After(publisher.id(), 1, absl::Now(), 25));
  EXPECT_EQ(by_sequence.size(), 2u);

  const absl::Time begin = absl::Now();
  ASSERT_OK_AND_ASSIGN(
      auto none,
      publisher.After(0, 0, absl::Now() + absl::Milliseconds(50), 30));
  EXPECT_TRUE(none.empty());
  EXPECT_GE(absl::Now() - begin, absl::Milliseconds(40));
  std::thread later([&] {
    absl::SleepFor(absl::Milliseconds(20));
    proto::PublishRequest request;
    request.set_step(31);
    ASSERT_OK(publisher.Publish(request).status());
  });
  ASSERT_OK_AND_ASSIGN(
      auto woken, publisher.After(0, 0, absl::Now() + absl::Seconds(30), 30));
  later.join();
  ASSERT_EQ(woken.size(), 1u);
  EXPECT_EQ(woken[0]->step(), 31u);
}

// Rows erased after they changed leave gaps among the rows read into a
// message: each published key keeps its own row, in every part.
TEST(PublisherTest, ErasedRowsAmongChangedOnesLeaveEachKeyItsOwnRow) {
  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto created, registry.Create(SgdTable("t")));
  ASSERT_OK_AND_ASSIGN(TableRegistry::Entry entry,
                       registry.Find(created.table_id));
  PublisherOptions options;
  options.max_message_bytes = 500;  // ~20 rows of 24 bytes a message
  Publisher publisher(options, &registry);
  ASSERT_OK(publisher.Publish(proto::PublishRequest()).status());
  std::vector<uint64_t> keys(90);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 1000 + 7 * i;
  // Zeros to start with; a row of its own for each key after a Push.
  std::vector<float> grads(keys.size() * kDim);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i);
  ASSERT_OK(entry.table->Push(keys, grads));
  std::vector<uint64_t> erased;
  for (size_t i = 0; i < keys.size(); i += 3) erased.push_back(keys[i]);
  erased.push_back(keys[1]);
  ASSERT_OK(entry.table->Erase(erased).status());
  ASSERT_OK(publisher.Publish(proto::PublishRequest()).status());
  ASSERT_OK_AND_ASSIGN(auto parts,
                       publisher.After(publisher.id(), 1, absl::Now()));
  ASSERT_GT(parts.size(), 2u);
  std::vector<uint64_t> published, removed;
  for (const auto& part : parts) {
    for (const auto& table : part->table()) {
      const std::vector<uint64_t> k = Keys(table.keys());
      const std::vector<float> v = Floats(table.values());
      ASSERT_EQ(v.size(), k.size() * kDim);
      for (size_t i = 0; i < k.size(); ++i) {
        std::vector<float> want(kDim);
        bool found = false;
        ASSERT_OK(entry.table
                      ->Lookup({k[i]}, absl::MakeSpan(want),
                               absl::MakeSpan(&found, 1),
                               embedding::Table::MissingRows::kZeros)
                      .status());
        ASSERT_TRUE(found) << k[i];
        EXPECT_EQ(std::vector<float>(v.begin() + i * kDim,
                                     v.begin() + (i + 1) * kDim),
                  want)
            << "key " << k[i];
        published.push_back(k[i]);
      }
      for (uint64_t key : Keys(table.removed())) removed.push_back(key);
    }
  }
  std::sort(removed.begin(), removed.end());
  std::sort(erased.begin(), erased.end());
  EXPECT_EQ(removed, erased);
  EXPECT_EQ(published.size() + removed.size(), keys.size());
}

TEST(PublisherTest, LargePublicationsAreSplitAndOldOnesLeaveTheHistory) {
  TableRegistry registry;
  ASSERT_OK_AND_ASSIGN(auto created, registry.Create(SgdTable("t")));
  ASSERT_OK_AND_ASSIGN(TableRegistry::Entry entry,
                       registry.Find(created.table_id));
  PublisherOptions options;
  options.max_message_bytes = 1000;  // ~40 rows of 24 bytes a message
  options.history_bytes = 5000;
  Publisher publisher(options, &registry);
  ASSERT_OK(publisher.Publish(proto::PublishRequest()).status());
  std::vector<uint64_t> keys(200);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i + 1;
  std::vector<float> rows(keys.size() * kDim);
  ASSERT_OK(entry.table->Pull(keys, absl::MakeSpan(rows)));
  ASSERT_OK(publisher.Publish(proto::PublishRequest()).status());
  ASSERT_OK_AND_ASSIGN(auto parts,
                       publisher.After(publisher.id(), 1, absl::Now()));
  ASSERT_GT(parts.size(), 1u);
  size_t keys_seen = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    EXPECT_EQ(parts[i]->part(), i);
    EXPECT_EQ(parts[i]->parts(), parts.size());
    EXPECT_LE(parts[i]->ByteSizeLong(), 1200u);
    for (const auto& table : parts[i]->table()) {
      keys_seen += table.keys().size() / 8;
    }
  }
  EXPECT_EQ(keys_seen, keys.size());
  // More publications than the history holds: the first ones are gone.
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(entry.table->Pull(keys, absl::MakeSpan(rows)));
    const std::vector<float> grads(rows.size(), 0.5f);
    ASSERT_OK(entry.table->Push(keys, grads));
    ASSERT_OK(publisher.Publish(proto::PublishRequest()).status());
  }
  EXPECT_THAT(
      publisher.After(publisher.id(), 1, absl::Now()),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("are gone")));
  EXPECT_THAT(publisher.After(publisher.id() + 1, 0, absl::Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("catch up from a checkpoint")));
}

}  // namespace
}  // namespace embedps::server
