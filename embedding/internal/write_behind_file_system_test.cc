#include "embedding/internal/write_behind_file_system.h"

#include <sys/resource.h>

#include <csignal>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"

namespace embedps::embedding::internal {
namespace {

using rocksdb::FileOptions;
using rocksdb::FSWritableFile;
using rocksdb::IOOptions;

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string RandomBytes(std::mt19937_64& random, size_t size) {
  std::string bytes(size, '\0');
  for (char& c : bytes) c = static_cast<char>(random());
  return bytes;
}

std::unique_ptr<FSWritableFile> Open(WriteBehindFileSystem& file_system,
                                     const std::string& path) {
  std::unique_ptr<FSWritableFile> file;
  const rocksdb::IOStatus opened =
      file_system.NewWritableFile(path, FileOptions(), &file, nullptr);
  EXPECT_TRUE(opened.ok()) << opened.ToString();
  return file;
}

TEST(WriteBehindFileSystemTest, AppendsReachTheFileInOrder) {
  // A limit smaller than many of the writes: the writer is held back often,
  // and a write larger than the limit still goes through alone.
  WriteBehindFileSystem file_system(rocksdb::FileSystem::Default(),
                                    /*max_pending_bytes=*/64 << 10);
  const std::string path = absl::StrCat(::testing::TempDir(), "/in_order");
  std::unique_ptr<FSWritableFile> file = Open(file_system, path);
  ASSERT_NE(file, nullptr);
  std::mt19937_64 random(7);
  std::string expected;
  for (int i = 0; i < 300; ++i) {
    const std::string chunk = RandomBytes(random, 1 + random() % 200'000);
    expected += chunk;
    ASSERT_TRUE(file->Append(chunk, IOOptions(), nullptr).ok());
    if (i % 50 == 0) {
      ASSERT_TRUE(file->Flush(IOOptions(), nullptr).ok());
    }
  }
  EXPECT_EQ(file->GetFileSize(IOOptions(), nullptr), expected.size());
  ASSERT_TRUE(file->Sync(IOOptions(), nullptr).ok());
  ASSERT_TRUE(file->Close(IOOptions(), nullptr).ok());
  EXPECT_EQ(ReadWholeFile(path), expected);
}

TEST(WriteBehindFileSystemTest, DestroyingAFileWritesWhatIsPending) {
  WriteBehindFileSystem file_system(rocksdb::FileSystem::Default(), 1 << 20);
  const std::string path = absl::StrCat(::testing::TempDir(), "/unclosed");
  std::mt19937_64 random(11);
  std::string expected;
  {
    std::unique_ptr<FSWritableFile> file = Open(file_system, path);
    ASSERT_NE(file, nullptr);
    for (int i = 0; i < 20; ++i) {
      const std::string chunk = RandomBytes(random, 100'000);
      expected += chunk;
      ASSERT_TRUE(file->Append(chunk, IOOptions(), nullptr).ok());
    }
  }
  EXPECT_EQ(ReadWholeFile(path), expected);
}

TEST(WriteBehindFileSystemTest, AFailedWriteFailsEveryLaterCall) {
  WriteBehindFileSystem file_system(rocksdb::FileSystem::Default(), 1 << 20);
  const std::string path = absl::StrCat(::testing::TempDir(), "/too_large");
  std::unique_ptr<FSWritableFile> file = Open(file_system, path);
  ASSERT_NE(file, nullptr);
  // The process may not write files past 64 KiB for a while: the write
  // fails with EFBIG (SIGXFSZ ignored).
  rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto previous_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string chunk(256 << 10, 'x');
  // The write itself may be reported by this call or a later one; Sync
  // waits for it.
  file->Append(chunk, IOOptions(), nullptr).PermitUncheckedError();
  const rocksdb::IOStatus synced = file->Sync(IOOptions(), nullptr);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &saved), 0);
  std::signal(SIGXFSZ, previous_handler);
  EXPECT_FALSE(synced.ok());
  EXPECT_NE(synced.ToString().find("too large"), std::string::npos)
      << synced.ToString();
  // Nothing is written after a failed write, though the limit is gone.
  EXPECT_FALSE(file->Append(chunk, IOOptions(), nullptr).ok());
  EXPECT_FALSE(file->Flush(IOOptions(), nullptr).ok());
  EXPECT_FALSE(file->Close(IOOptions(), nullptr).ok());
  EXPECT_LE(ReadWholeFile(path).size(), size_t{64} << 10);
}

// The way checkpoints use it: an SstFileWriter over the write-behind env with
// direct IO (positioned appends of aligned buffers). Every row reads back.
TEST(WriteBehindFileSystemTest, SstFileWriterWithDirectWritesReadsBack) {
  const std::unique_ptr<rocksdb::Env> env = NewWriteBehindEnv(8 << 20);
  rocksdb::Options options;
  options.env = env.get();
  rocksdb::EnvOptions env_options(options);
  env_options.use_direct_writes = true;
  env_options.writable_file_max_buffer_size = 1 << 20;
  const std::string path = absl::StrCat(::testing::TempDir(), "/direct.sst");
  rocksdb::SstFileWriter writer(env_options, options, nullptr,
                                /*invalidate_page_cache=*/false);
  if (!writer.Open(path).ok()) {
    GTEST_SKIP() << "the test's temporary directory (" << ::testing::TempDir()
                 << ") does not take direct IO";
  }
  constexpr int kRows = 20'000;
  const auto key = [](int i) {
    char bytes[8];
    for (int b = 0; b < 8; ++b) {
      bytes[b] = static_cast<char>(static_cast<uint64_t>(i) >> (56 - 8 * b));
    }
    return std::string(bytes, 8);
  };
  const auto value = [](int i) {
    return std::string(300, static_cast<char>(i));
  };
  for (int i = 0; i < kRows; ++i) {
    ASSERT_TRUE(writer.Put(key(i), value(i)).ok());
  }
  rocksdb::ExternalSstFileInfo info;
  ASSERT_TRUE(writer.Finish(&info).ok());
  EXPECT_EQ(info.num_entries, static_cast<uint64_t>(kRows));

  rocksdb::SstFileReader reader{rocksdb::Options()};
  ASSERT_TRUE(reader.Open(path).ok());
  ASSERT_TRUE(reader.VerifyChecksum().ok());
  std::unique_ptr<rocksdb::Iterator> it(
      reader.NewIterator(rocksdb::ReadOptions()));
  int i = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next(), ++i) {
    ASSERT_EQ(it->key().ToString(), key(i));
    ASSERT_EQ(it->value().ToString(), value(i));
  }
  ASSERT_TRUE(it->status().ok());
  EXPECT_EQ(i, kRows);
}

}  // namespace
}  // namespace embedps::embedding::internal
