#include "common/malloc_options.h"

#include <sys/resource.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace embedps {
namespace {

long MinorFaults() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A 20 MiB buffer allocated, written and freed again and again (as each
// RPC of a large Pull or Push does) is faulted in once, not every time.
TEST(MallocOptionsTest, LargeBuffersAreReusedNotRefaulted) {
  ASSERT_TRUE(ReuseLargeAllocations());
  constexpr size_t kBytes = size_t{20} << 20;
  const auto use_once = [] {
    char* volatile p = static_cast<char*>(std::malloc(kBytes));
    ASSERT_NE(p, nullptr);
    std::memset(p, 1, kBytes);
    std::free(p);
  };
  use_once();
  const long before = MinorFaults();
  for (int i = 0; i < 20; ++i) use_once();
  // Without the options: about 20 * 5120 faults of 4 KiB pages.
  EXPECT_LT(MinorFaults() - before, 2000);
}

long AnonymousKiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

// What a checkpoint's writer leaves behind: many blocks below the mmap
// threshold, freed. They stay with the process until ReturnFreedMemory.
TEST(MallocOptionsTest, ReturnFreedMemoryGivesBackFreedBlocks) {
  ASSERT_TRUE(ReuseLargeAllocations());
  constexpr size_t kBlock = size_t{256} << 10;
  constexpr int kBlocks = 512;  // 128 MiB
  std::vector<char*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(static_cast<char*>(std::malloc(kBlock)));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), 1, kBlock);
  }
  const long held = AnonymousKiB();
  for (char* block : blocks) std::free(block);
  const long freed = AnonymousKiB();
  ReturnFreedMemory();
  const long returned = AnonymousKiB();
  // Kept while freed (the point of ReuseLargeAllocations)...
  EXPECT_GT(freed, held - 16 * 1024);
  // ...and given back: at least 96 of the 128 MiB.
  EXPECT_LT(returned, freed - 96 * 1024) << held << " " << freed;
}

}  // namespace
}  // namespace embedps
