// SpillStore's own contract: batched writes and reads of fixed-size
// records, and access-metadata updates that keep a record's floats.
#include "embedding/internal/spill_store.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_matchers.h"
#include "gtest/gtest.h"

namespace embedps::embedding_internal {
namespace {

constexpr size_t kRecordBytes = 24;  // 8 bytes of metadata, 4 floats

std::unique_ptr<SpillStore> OpenStore(const std::string& name,
                                      bool read_around = false,
                                      size_t record_bytes = kRecordBytes) {
  SpillStoreOptions options;
  options.path = absl::StrCat(::testing::TempDir(), "/", name);
  options.record_bytes = record_bytes;
  options.read_around = read_around;
  auto store = SpillStore::Open(options);
  EXPECT_OK(store.status());
  return std::move(store).value();
}

// A record whose every byte is `fill`.
std::string Record(char fill) { return std::string(kRecordBytes, fill); }

// Access metadata whose 8 bytes in memory are `bytes`.
uint64_t Metadata(const std::string& bytes) {
  uint64_t metadata = 0;
  std::memcpy(&metadata, bytes.data(), sizeof(metadata));
  return metadata;
}

std::string Get(SpillStore& store, uint64_t key) {
  char record[kRecordBytes];
  bool found = false;
  EXPECT_OK(store.MultiGet({key}, record, absl::MakeSpan(&found, 1)));
  return found ? std::string(record, kRecordBytes) : "";
}

TEST(SpillStoreTest, MetadataUpdatesReplaceTheFirstEightBytesOnly) {
  auto store = OpenStore("metadata");
  const std::string records = Record('a') + Record('b');
  ASSERT_OK(store->Write({1, 2}, records.data(), {}));
  // Two updates of key 1 (the later wins), one of key 2.
  const std::string first = "11111111", second = "22222222", third = "3333333X";
  ASSERT_OK(store->Write({}, nullptr, {}, {1}, {Metadata(first)}));
  ASSERT_OK(store->Write({}, nullptr, {}, {1, 2},
                         {Metadata(second), Metadata(third)}));
  EXPECT_EQ(Get(*store, 1), second + std::string(kRecordBytes - 8, 'a'));
  EXPECT_EQ(Get(*store, 2), third + std::string(kRecordBytes - 8, 'b'));
  // The same through a read view's scan, which checkpoints use.
  std::vector<std::string> scanned;
  ASSERT_OK(store->NewReadView()->ForEach([&](uint64_t, const char* record) {
    scanned.emplace_back(record, kRecordBytes);
    return absl::OkStatus();
  }));
  EXPECT_EQ(scanned,
            (std::vector<std::string>{Get(*store, 1), Get(*store, 2)}));
  // A put replaces the record with its metadata; a delete removes both.
  ASSERT_OK(store->Write({1}, Record('c').data(), {2}));
  EXPECT_EQ(Get(*store, 1), Record('c'));
  EXPECT_EQ(Get(*store, 2), "");
  EXPECT_EQ(store->Stats().metadata_updates, 3u);
}

// Both ways of reading the files (random-access advice, or read-around)
// return every record, from RocksDB's files rather than its memtables.
class SpillStoreReadTest : public ::testing::TestWithParam<bool> {};

TEST_P(SpillStoreReadTest, RecordsComeBackFromTheFiles) {
  constexpr size_t kBig = 4096;
  auto store =
      OpenStore(absl::StrCat("read_around_", GetParam()), GetParam(), kBig);
  // 100 MiB of records: more than the four 16 MiB memtables RocksDB may
  // hold, so writes wait until at least a third of them are in SST files.
  constexpr uint64_t kKeys = (uint64_t{100} << 20) / kBig;
  constexpr uint64_t kPerWrite = 1000;
  const auto record_of = [&](uint64_t key) {
    std::string record(kBig, static_cast<char>('a' + key % 26));
    std::memcpy(record.data() + 8, &key, sizeof(key));
    return record;
  };
  std::vector<uint64_t> keys;
  std::string records;
  for (uint64_t begin = 0; begin < kKeys; begin += kPerWrite) {
    keys.clear();
    records.clear();
    for (uint64_t k = begin; k < std::min(kKeys, begin + kPerWrite); ++k) {
      keys.push_back(k);
      records += record_of(k);
    }
    ASSERT_OK(store->Write(keys, records.data(), {}));
  }
  EXPECT_GE(store->DiskBytes(), uint64_t{32} << 20);
  std::string record(kBig, '\0');
  for (uint64_t k = 0; k < kKeys; k += 97) {
    bool found = false;
    ASSERT_OK(store->MultiGet({k}, record.data(), absl::MakeSpan(&found, 1)));
    ASSERT_TRUE(found) << "key " << k;
    EXPECT_EQ(record, record_of(k)) << "key " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(RandomOrReadAround, SpillStoreReadTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "ReadAround" : "Random";
                         });

TEST(SpillStoreTest, MetadataKeysAndValuesMustPair) {
  auto store = OpenStore("unpaired_metadata");
  ASSERT_OK(store->Write({1}, Record('a').data(), {}));
  EXPECT_THAT(store->Write({}, nullptr, {}, {1, 2}, {Metadata("12345678")}),
              ::embedps::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                           ::testing::HasSubstr("2 metadata")));
  EXPECT_EQ(Get(*store, 1), Record('a'));  // nothing written
}

TEST(SpillStoreTest, MetadataWithoutARecordIsAnErrorNotACrash) {
  auto store = OpenStore("orphan_metadata");
  ASSERT_OK(store->Write({1}, Record('a').data(), {}));
  const std::string metadata = "12345678";
  ASSERT_OK(store->Write({}, nullptr, {}, {9}, {Metadata(metadata)}));
  char records[2 * kRecordBytes];
  bool found[2] = {false, false};
  EXPECT_THAT(store->MultiGet({1, 9}, records, absl::MakeSpan(found, 2)),
              ::embedps::testing::StatusIs(absl::StatusCode::kInternal,
                                           ::testing::HasSubstr("merge")));
  EXPECT_EQ(Get(*store, 1), Record('a'));  // other keys still read
}

}  // namespace
}  // namespace embedps::embedding_internal
