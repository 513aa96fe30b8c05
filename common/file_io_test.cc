#include "common/file_io.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps {
namespace {

using ::embedps::testing::StatusIs;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(n, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  return bytes;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good());
}

std::string ReadBack(const std::string& path, PageCache page_cache,
                     size_t* chunks = nullptr) {
  std::string read;
  size_t count = 0;
  EXPECT_OK(ReadFileInChunks(
      path,
      [&](absl::string_view chunk) {
        EXPECT_FALSE(chunk.empty());
        read.append(chunk.data(), chunk.size());
        ++count;
      },
      page_cache));
  if (chunks != nullptr) *chunks = count;
  return read;
}

// Sizes around the direct-IO alignment (4 KiB) and the chunk (8 MiB).
class ReadFileInChunksTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ReadFileInChunksTest, BothWaysReadEveryByteInOrder) {
  const size_t size = GetParam();
  const std::string path = TempPath("chunks_" + std::to_string(size));
  const std::string bytes = RandomBytes(size, size);
  WriteFile(path, bytes);
  EXPECT_EQ(ReadBack(path, PageCache::kUse), bytes);
  EXPECT_EQ(ReadBack(path, PageCache::kBypass), bytes);
  unlink(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Sizes, ReadFileInChunksTest,
                         ::testing::Values(0, 1, 4095, 4096, 4097,
                                           (size_t{8} << 20) - 1,
                                           size_t{8} << 20,
                                           (size_t{16} << 20) + 4097));

TEST(ReadFileInChunks, LargeFilesComeInChunksOfAtMostEightMiB) {
  const std::string path = TempPath("chunks_large");
  WriteFile(path, RandomBytes((size_t{20} << 20) + 5, 7));
  size_t chunks = 0;
  ReadBack(path, PageCache::kBypass, &chunks);
  EXPECT_EQ(chunks, 3u);
  unlink(path.c_str());
}

TEST(ReadFileInChunks, BypassFallsBackWhereTheFileSystemHasNoDirectIo) {
  // /dev/shm is tmpfs, which refuses O_DIRECT on older kernels and allows
  // it on newer ones: either way every byte comes back.
  struct stat info;
  if (stat("/dev/shm", &info) != 0) GTEST_SKIP() << "no /dev/shm here";
  const std::string path =
      "/dev/shm/embedps_file_io_test_" + std::to_string(getpid());
  const std::string bytes = RandomBytes(10000, 3);
  WriteFile(path, bytes);
  EXPECT_EQ(ReadBack(path, PageCache::kBypass), bytes);
  unlink(path.c_str());
}

TEST(ReadFileInChunks, AMissingFileIsNotFoundAndNamed) {
  for (const PageCache page_cache : {PageCache::kUse, PageCache::kBypass}) {
    EXPECT_THAT(
        ReadFileInChunks(
            TempPath("does_not_exist"), [](absl::string_view) {}, page_cache),
        StatusIs(absl::StatusCode::kNotFound,
                 ::testing::HasSubstr("does_not_exist")));
  }
}

TEST(ReadFileInChunks, ADirectoryCannotBeRead) {
  EXPECT_THAT(
      ReadFileInChunks(
          std::getenv("TEST_TMPDIR") != nullptr ? std::getenv("TEST_TMPDIR")
                                                : "/tmp",
          [](absl::string_view) {}, PageCache::kBypass),
      StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace embedps
