#include "checkpoint/table_file.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/key_hash.h"
#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/file_system.h"
#include "xxhash.h"

// The files hold the engine's tables: the test reads as the engine's.
namespace embedps::embedding {
namespace {

using ::embedps::checkpoint::RestoreTableFile;
using ::embedps::checkpoint::TableFileRestore;
using ::embedps::checkpoint::TableFileSummary;
using ::embedps::checkpoint::TableFileWriteOptions;
using ::embedps::checkpoint::TableFileXxh3;
using ::embedps::checkpoint::WriteTableFile;

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kDim = 4;

// Every field of every row, bitwise.
std::map<uint64_t, std::string> Contents(const Table& table) {
  std::map<uint64_t, std::string> rows;
  EXPECT_OK(table.Scan([&](const RowView& row) {
    std::string bytes(reinterpret_cast<const char*>(row.embedding.data()),
                      row.embedding.size() * sizeof(float));
    bytes.append(reinterpret_cast<const char*>(row.optimizer_state.data()),
                 row.optimizer_state.size() * sizeof(float));
    bytes.append(absl::StrCat("|", row.access_count, "|", row.last_touch));
    rows[row.key] = bytes;
  }));
  return rows;
}

TableSpec AdamSpec() {
  TableSpec spec;
  spec.name = "ckpt";
  spec.dim = kDim;
  spec.num_stripes = 8;
  spec.optimizer.kind = OptimizerSpec::Kind::kAdam;
  return spec;
}

// Test parameter: whether the tables spill (most rows in RocksDB).
class CheckpointFileTest : public ::testing::TestWithParam<bool> {
 protected:
  std::string Dir() {
    const std::string dir = absl::StrCat(
        ::testing::TempDir(), "/ckpt_",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir);
    return dir;
  }

  std::unique_ptr<Table> MakeTable(TableSpec spec = AdamSpec()) {
    TableOptions options;
    if (GetParam()) {
      spec.memory_budget_bytes = spec.num_stripes * 10 * 100;
      options.spill_directory = absl::StrCat(Dir(), "/spill", tables_++);
    }
    auto table = Table::Create(spec, options);
    EXPECT_OK(table.status());
    return std::move(table).value();
  }

  // Pulls and pushes random keys of [0, 1000·stride).
  static void Train(Table& table, int rounds, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<uint64_t> key_of(0, 999);
    std::normal_distribution<float> grad_of(0.0f, 1.0f);
    for (int round = 0; round < rounds; ++round) {
      std::vector<uint64_t> keys(100);
      for (uint64_t& key : keys) key = key_of(rng) * 7919;
      std::vector<float> values(keys.size() * kDim);
      std::vector<float> grads(keys.size() * kDim);
      for (float& g : grads) g = grad_of(rng);
      const AccessContext context{static_cast<uint64_t>(round)};
      ASSERT_OK(table.Pull(keys, absl::MakeSpan(values), context));
      ASSERT_OK(table.Push(keys, grads, context));
    }
  }

  static TableFileRestore Restore(const std::string& path, uint64_t checksum,
                                  Table& table) {
    auto restored = RestoreTableFile(path, checksum, table);
    EXPECT_OK(restored.status());
    return restored.ok() ? *restored : TableFileRestore{};
  }

  int tables_ = 0;
};

INSTANTIATE_TEST_SUITE_P(MemoryAndSpill, CheckpointFileTest,
                         ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "Spilling" : "MemoryOnly";
                         });

// A file system that refuses direct IO (as some do: O_DIRECT gets EINVAL),
// counting the opens it saw.
class NoDirectIoFileSystem : public rocksdb::FileSystemWrapper {
 public:
  NoDirectIoFileSystem() : FileSystemWrapper(rocksdb::FileSystem::Default()) {}
  const char* Name() const override { return "NoDirectIoFileSystem"; }
  rocksdb::IOStatus NewWritableFile(
      const std::string& path, const rocksdb::FileOptions& options,
      std::unique_ptr<rocksdb::FSWritableFile>* result,
      rocksdb::IODebugContext* dbg) override {
    if (options.use_direct_writes) {
      ++refused;
      return rocksdb::IOStatus::InvalidArgument(path, "no O_DIRECT here");
    }
    ++buffered;
    return target()->NewWritableFile(path, options, result, dbg);
  }
  int refused = 0;
  int buffered = 0;
};

TEST_P(CheckpointFileTest, FileSystemsWithoutDirectIoGetBufferedWrites) {
  auto table = MakeTable();
  Train(*table, 30, 1);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  const auto want = Contents(*table);
  auto file_system = std::make_shared<NoDirectIoFileSystem>();
  const std::string path = Dir() + "/buffered.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*snapshot, path, {file_system}));
  EXPECT_EQ(file_system->refused, 1);
  EXPECT_EQ(file_system->buffered, 1);
  EXPECT_EQ(summary.rows, want.size());
  ASSERT_OK_AND_ASSIGN(const uint64_t checksum, TableFileXxh3(path));
  EXPECT_EQ(checksum, summary.xxh3);
  auto restored = MakeTable();
  EXPECT_EQ(Restore(path, summary.xxh3, *restored).rows, want.size());
  EXPECT_EQ(Contents(*restored), want);
  // A file written with direct IO holds the same rows (not the same bytes:
  // each file's properties name its own creation).
  const std::string direct = Dir() + "/direct.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary direct_summary,
                       WriteTableFile(*snapshot, direct));
  auto from_direct = MakeTable();
  Restore(direct, direct_summary.xxh3, *from_direct);
  EXPECT_EQ(Contents(*from_direct), want);
}

TEST_P(CheckpointFileTest, FullCheckpointRestoresEveryRowExactly) {
  auto table = MakeTable();
  Train(*table, 50, 1);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  EXPECT_FALSE(snapshot->incremental());
  const auto want = Contents(*table);
  // Training goes on while the file is written: the file holds the
  // snapshot, not the later rows.
  Train(*table, 5, 2);
  const std::string path = Dir() + "/full.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*snapshot, path));
  EXPECT_EQ(summary.rows, want.size());
  EXPECT_EQ(summary.removed, 0u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  // The checksum computed while writing is the file's XXH3.
  ASSERT_OK_AND_ASSIGN(const uint64_t checksum, TableFileXxh3(path));
  EXPECT_EQ(checksum, summary.xxh3);

  auto restored = MakeTable();
  const TableFileRestore result = Restore(path, summary.xxh3, *restored);
  EXPECT_EQ(result.rows, want.size());
  EXPECT_EQ(Contents(*restored), want);
  if (GetParam()) {
    EXPECT_EQ(std::filesystem::hard_link_count(path), 2u)
        << "the spill tier holds the file by a hard link";
  }
  const TableStats stats = restored->Stats();
  EXPECT_EQ(stats.resident_rows + stats.spilled_rows, want.size());
  // A spilling table adopted the file into its spill tier; training on
  // (spills, promotions, compactions) never changes the file.
  Train(*restored, 30, 3);
  ASSERT_OK_AND_ASSIGN(const uint64_t checksum_after, TableFileXxh3(path));
  EXPECT_EQ(checksum_after, summary.xxh3);
  // And the table checkpoints on: the adopted file's metadata entries are
  // not rows.
  ASSERT_OK_AND_ASSIGN(auto again, restored->TakeSnapshot(false));
  const auto want_again = Contents(*restored);
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary_again,
                       WriteTableFile(*again, Dir() + "/again.sst"));
  auto restored_again = MakeTable();
  Restore(Dir() + "/again.sst", summary_again.xxh3, *restored_again);
  EXPECT_EQ(Contents(*restored_again), want_again);
}

TEST_P(CheckpointFileTest, AnAdoptedFileWithoutRecordsServesRowsFromDisk) {
  if (!GetParam()) GTEST_SKIP() << "adopting needs a spill tier";
  auto table = MakeTable();
  Train(*table, 50, 1);
  const auto want = Contents(*table);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  const std::string path = Dir() + "/full.sst";
  ASSERT_OK(WriteTableFile(*snapshot, path).status());
  // No rows read ahead: every row stays in the spill tier.
  auto restored = MakeTable();
  std::vector<uint64_t> rows_per_stripe(restored->spec().num_stripes, 0);
  for (const auto& [key, row] : want) {
    ++rows_per_stripe[restored->StripeOfKey(key)];
  }
  ASSERT_OK(restored->AdoptSpillFile(path, {}, {}, rows_per_stripe));
  EXPECT_EQ(Contents(*restored), want);
  const TableStats stats = restored->Stats();
  EXPECT_EQ(stats.resident_rows, 0u);
  EXPECT_EQ(stats.spilled_rows, want.size());
  // Rows come to memory on use, as spilled ones do.
  Train(*restored, 5, 2);
  EXPECT_GT(restored->Stats().resident_rows, 0u);
}

TEST_P(CheckpointFileTest, AFileOnAnotherFileSystemIsCopiedNotLinked) {
  if (!GetParam()) GTEST_SKIP() << "adopting needs a spill tier";
  // tmpfs: another file system than the test's temporary directory, so the
  // hard link fails and the spill tier takes a copy.
  const std::string elsewhere = absl::StrCat(
      "/dev/shm/embedps_ckpt_",
      ::testing::UnitTest::GetInstance()->random_seed(), "_", getpid());
  std::error_code error;
  if (!std::filesystem::create_directories(elsewhere, error) || error) {
    GTEST_SKIP() << "no /dev/shm here";
  }
  auto table = MakeTable();
  Train(*table, 30, 1);
  const auto want = Contents(*table);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  const std::string path = elsewhere + "/full.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*snapshot, path));
  auto restored = MakeTable();
  Restore(path, summary.xxh3, *restored);
  EXPECT_EQ(Contents(*restored), want);
  EXPECT_EQ(std::filesystem::hard_link_count(path), 1u) << "copied, not linked";
  std::filesystem::remove_all(elsewhere);
  // The copy is the spill tier's own: the rows stay readable.
  EXPECT_EQ(Contents(*restored), want);
}

TEST_P(CheckpointFileTest, IncrementalHoldsOnlyChangesAndRestoresOnTop) {
  auto table = MakeTable();
  Train(*table, 40, 3);
  ASSERT_OK_AND_ASSIGN(auto full, table->TakeSnapshot(false));
  const std::string dir = Dir();
  ASSERT_OK_AND_ASSIGN(const TableFileSummary full_summary,
                       WriteTableFile(*full, dir + "/full.sst"));

  // Change some rows, remove some, create some.
  std::vector<uint64_t> changed = {7919 * 3, 7919 * 5, 7919 * 500};
  std::vector<float> grads(changed.size() * kDim, 0.25f);
  ASSERT_OK(table->Push(changed, grads, AccessContext{99}));
  const std::vector<uint64_t> erased = {7919 * 7, 7919 * 11};
  ASSERT_OK_AND_ASSIGN(const uint64_t erased_count, table->Erase(erased));
  const std::vector<uint64_t> created = {123456789, 987654321};
  std::vector<float> values(created.size() * kDim);
  ASSERT_OK(table->Pull(created, absl::MakeSpan(values), AccessContext{99}));

  ASSERT_OK_AND_ASSIGN(auto increment, table->TakeSnapshot(true));
  EXPECT_TRUE(increment->incremental());
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*increment, dir + "/incr.sst"));
  // Pushed rows (that existed) and the created rows; nothing else.
  uint64_t existing_changed = 0;
  {
    auto probe = MakeTable();
    Restore(dir + "/full.sst", full_summary.xxh3, *probe);
    std::vector<float> out(changed.size() * kDim);
    std::unique_ptr<bool[]> found(new bool[changed.size()]);
    ASSERT_OK_AND_ASSIGN(
        existing_changed,
        probe->Lookup(changed, absl::MakeSpan(out),
                      absl::MakeSpan(found.get(), changed.size()),
                      Table::MissingRows::kZeros));
  }
  EXPECT_EQ(summary.rows, existing_changed + created.size());
  EXPECT_EQ(summary.removed, erased_count);

  auto restored = MakeTable();
  Restore(dir + "/full.sst", full_summary.xxh3, *restored);
  const TableFileRestore result =
      Restore(dir + "/incr.sst", summary.xxh3, *restored);
  EXPECT_TRUE(result.incremental);
  EXPECT_EQ(Contents(*restored), Contents(*table));

  // A third snapshot with no changes in between is empty.
  ASSERT_OK_AND_ASSIGN(auto nothing, table->TakeSnapshot(true));
  ASSERT_OK_AND_ASSIGN(const TableFileSummary empty,
                       WriteTableFile(*nothing, dir + "/empty.sst"));
  EXPECT_EQ(empty.rows, 0u);
  EXPECT_EQ(empty.removed, 0u);
}

TEST_P(CheckpointFileTest, RestoringWithAKeyFilterSplitsRowsExactly) {
  auto table = MakeTable();
  Train(*table, 30, 4);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  const std::string path = Dir() + "/full.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*snapshot, path));
  const auto want = Contents(*table);
  std::map<uint64_t, std::string> united;
  for (int32_t shard = 0; shard < 3; ++shard) {
    auto part = MakeTable();
    ASSERT_OK(RestoreTableFile(path, summary.xxh3, *part, [&](uint64_t key) {
                return JumpConsistentHash(Mix64(key), 3) == shard;
              }).status());
    for (const auto& [key, row] : Contents(*part)) {
      EXPECT_EQ(JumpConsistentHash(Mix64(key), 3), shard);
      EXPECT_TRUE(united.emplace(key, row).second) << "key on two shards";
    }
  }
  EXPECT_EQ(united, want);
}

TEST_P(CheckpointFileTest, AdmissionCountsSurviveARestore) {
  TableSpec spec = AdamSpec();
  spec.admission.kind = AdmissionSpec::Kind::kCount;
  spec.admission.min_count = 3;
  spec.admission.sketch_counters = 1 << 12;
  auto table = MakeTable(spec);
  std::vector<float> value(kDim);
  ASSERT_OK(table->Pull({42}, absl::MakeSpan(value)));
  ASSERT_OK(table->Pull({42}, absl::MakeSpan(value)));
  EXPECT_EQ(table->Stats().rows, 0u);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  const std::string path = Dir() + "/admission.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*snapshot, path));

  auto restored = MakeTable(spec);
  const TableFileRestore result = Restore(path, summary.xxh3, *restored);
  ASSERT_OK(restored->MergeAdmissionStates(result.admission_states));
  ASSERT_OK(restored->Pull({42}, absl::MakeSpan(value)));
  EXPECT_EQ(restored->Stats().rows, 1u) << "third sighting admits";

  auto fresh = MakeTable(spec);
  ASSERT_OK(fresh->Pull({42}, absl::MakeSpan(value)));
  EXPECT_EQ(fresh->Stats().rows, 0u);

  std::vector<std::string> one_stripe_too_many = result.admission_states;
  one_stripe_too_many.push_back("");
  EXPECT_THAT(
      restored->MergeAdmissionStates(one_stripe_too_many),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lock stripes")));
  // Records of the wrong size change nothing.
  const uint64_t rows_before = restored->Stats().rows;
  EXPECT_THAT(
      restored->RestoreRows({{1, 2}}, std::vector<char>(7)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 keys need")));
  EXPECT_EQ(restored->Stats().rows, rows_before);

  TableSpec other = spec;
  other.admission.sketch_counters = 1 << 14;
  auto mismatched = MakeTable(other);
  EXPECT_THAT(mismatched->MergeAdmissionStates(result.admission_states),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("sketch_counters")));
}

TEST_P(CheckpointFileTest, CorruptTruncatedOrForeignFilesAreRefused) {
  auto table = MakeTable();
  Train(*table, 10, 5);
  ASSERT_OK_AND_ASSIGN(auto snapshot, table->TakeSnapshot(false));
  const std::string dir = Dir();
  const std::string path = dir + "/good.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*snapshot, path));
  const auto keep_all = [](uint64_t) { return true; };

  // A flipped byte in the middle.
  const std::string flipped = dir + "/flipped.sst";
  std::filesystem::copy_file(path, flipped);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(summary.bytes / 2));
    f.put('\x5a');
  }
  auto target = MakeTable();
  EXPECT_THAT(RestoreTableFile(flipped, summary.xxh3, *target, keep_all),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(flipped)));
  // Truncated.
  const std::string truncated = dir + "/truncated.sst";
  std::filesystem::copy_file(path, truncated);
  std::filesystem::resize_file(truncated, summary.bytes - 100);
  EXPECT_THAT(RestoreTableFile(truncated, summary.xxh3, *target, keep_all),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(truncated)));
  // Missing.
  EXPECT_THAT(
      RestoreTableFile(dir + "/missing.sst", summary.xxh3, *target, keep_all),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.sst")));
  // The same files whole, without a key filter: a spilling table would
  // adopt them (their checksum then reads them around the page cache).
  for (const std::string& bad : {flipped, truncated}) {
    EXPECT_THAT(RestoreTableFile(bad, summary.xxh3, *target),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(bad)));
  }
  EXPECT_EQ(target->Stats().rows, 0u) << "nothing restored from bad files";
  EXPECT_EQ(target->Stats().spilled_rows, 0u);
  // Right bytes, wrong table shape.
  TableSpec sgd = AdamSpec();
  sgd.optimizer.kind = OptimizerSpec::Kind::kSgd;
  auto other = MakeTable(sgd);
  EXPECT_THAT(RestoreTableFile(path, summary.xxh3, *other, keep_all),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("dim or optimizer changed")));
}

// Collects what ReadTableFileValues hands over.
class CollectingSink : public checkpoint::ValuesSink {
 public:
  absl::Status Rows(absl::Span<const uint64_t> keys,
                    absl::Span<const float> embeddings) override {
    EXPECT_EQ(embeddings.size(), keys.size() * kDim);
    for (size_t i = 0; i < keys.size(); ++i) {
      rows[keys[i]].assign(embeddings.begin() + i * kDim,
                           embeddings.begin() + (i + 1) * kDim);
    }
    return absl::OkStatus();
  }
  absl::Status Removed(absl::Span<const uint64_t> keys) override {
    removed.insert(removed.end(), keys.begin(), keys.end());
    return absl::OkStatus();
  }
  std::map<uint64_t, std::vector<float>> rows;
  std::vector<uint64_t> removed;
};

// A reader that keeps embeddings only (a serving replica's overlay) gets
// an incremental file's changed rows' embeddings exactly, its removals, the
// rows of its keys only; a bad file fails, a wrong dim hands it nothing.
TEST_P(CheckpointFileTest, ValuesAloneGoToASink) {
  auto table = MakeTable();
  Train(*table, 20, 6);
  ASSERT_OK_AND_ASSIGN(auto full, table->TakeSnapshot(false));
  const std::string dir = Dir();
  ASSERT_OK(WriteTableFile(*full, dir + "/full.sst").status());
  const std::vector<uint64_t> changed = {7919 * 3, 7919 * 5};
  ASSERT_OK(table->Push(changed, std::vector<float>(2 * kDim, 0.5f)));
  ASSERT_OK_AND_ASSIGN(const uint64_t erased, table->Erase({7919 * 9}));
  ASSERT_OK_AND_ASSIGN(auto increment, table->TakeSnapshot(true));
  const std::string path = dir + "/incr.sst";
  ASSERT_OK_AND_ASSIGN(const TableFileSummary summary,
                       WriteTableFile(*increment, path));
  const checkpoint::FileChecksum checksum{checkpoint::FileChecksum::Kind::kXxh3,
                                          summary.xxh3};
  std::map<uint64_t, std::vector<float>> want;
  ASSERT_OK(table->Scan([&](const RowView& row) {
    want[row.key].assign(row.embedding.begin(), row.embedding.end());
  }));

  CollectingSink sink;
  ASSERT_OK_AND_ASSIGN(
      const TableFileRestore result,
      checkpoint::ReadTableFileValues(path, checksum, kDim, sink));
  EXPECT_TRUE(result.incremental);
  EXPECT_EQ(result.rows, summary.rows);
  ASSERT_EQ(sink.rows.size(), summary.rows);
  for (const auto& [key, embedding] : sink.rows) {
    EXPECT_EQ(embedding, want.at(key)) << key;
  }
  EXPECT_EQ(sink.removed, erased > 0 ? std::vector<uint64_t>{7919 * 9}
                                     : std::vector<uint64_t>{});

  // One of three shards' keys.
  const auto shard_one = [](uint64_t key) {
    return JumpConsistentHash(Mix64(key), 3) == 1;
  };
  CollectingSink part;
  ASSERT_OK(
      checkpoint::ReadTableFileValues(path, checksum, kDim, part, shard_one)
          .status());
  for (const auto& [key, embedding] : part.rows) EXPECT_TRUE(shard_one(key));
  EXPECT_LE(part.rows.size(), sink.rows.size());

  // A damaged file, or one that is not the manifest's, fails (whatever
  // reached the sink is dropped by its owner): the checksum is checked
  // after the rows were read.
  CollectingSink dropped;
  const std::string flipped = dir + "/flipped.sst";
  std::filesystem::copy_file(path, flipped);
  {
    std::fstream f(flipped, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(summary.bytes / 2));
    f.put('\x5a');
  }
  EXPECT_THAT(checkpoint::ReadTableFileValues(flipped, checksum, kDim, dropped),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(flipped)));
  const checkpoint::FileChecksum other{checkpoint::FileChecksum::Kind::kXxh3,
                                       summary.xxh3 + 1};
  EXPECT_THAT(checkpoint::ReadTableFileValues(path, other, kDim, dropped),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("is corrupt or truncated")));
  CollectingSink untouched;
  EXPECT_THAT(
      checkpoint::ReadTableFileValues(path, checksum, kDim * 4, untouched),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("embeddings of dim 16")));
  EXPECT_THAT(checkpoint::ReadTableFileValues(path, checksum, 0, untouched),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(untouched.rows.empty());
  EXPECT_TRUE(untouched.removed.empty());
}

TEST(TableFileXxh3Test, IsXxh3OfTheWholeFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/check.bin");
  std::string bytes(3 << 20, '\0');
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>(i * 31);
  std::ofstream(path, std::ios::binary) << bytes;
  ASSERT_OK_AND_ASSIGN(const uint64_t checksum, TableFileXxh3(path));
  // xxHash's one-shot function over the same bytes.
  EXPECT_EQ(checksum, XXH3_64bits(bytes.data(), bytes.size()));
  ASSERT_OK_AND_ASSIGN(const uint64_t read_around_the_cache,
                       TableFileXxh3(path, PageCache::kBypass));
  EXPECT_EQ(read_around_the_cache, checksum);
  EXPECT_THAT(TableFileXxh3(path + ".missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

}  // namespace
}  // namespace embedps::embedding
