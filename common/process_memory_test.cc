#include "common/process_memory.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace embedps {
namespace {

// A directory holding the files AvailableMemoryBytes reads.
class FakeRoot {
 public:
  FakeRoot() {
    root_ = std::string(std::getenv("TEST_TMPDIR") != nullptr
                            ? std::getenv("TEST_TMPDIR")
                            : "/tmp") +
            "/memroot_" + std::to_string(counter_++);
    std::filesystem::remove_all(root_);
    Write("/proc/meminfo",
          "MemTotal:       24684096 kB\nMemFree:         1000 kB\n");
  }
  ~FakeRoot() { std::filesystem::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(
        std::filesystem::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text;
  }
  const std::string& root() const { return root_; }

 private:
  static inline int counter_ = 0;
  std::string root_;
};

constexpr uint64_t kMachine = uint64_t{24684096} << 10;

TEST(ProcessMemoryTest, ReadsItself) {
  EXPECT_GT(ResidentBytes(), 0u);
  EXPECT_GT(AvailableMemoryBytes(), 0u);
  EXPECT_LE(AvailableMemoryBytes(), kMachine * 1024);
}

TEST(ProcessMemoryTest, TheMachineWithoutACgroupLimit) {
  FakeRoot fake;
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), kMachine);
  fake.Write("/proc/self/cgroup", "0::/job\n");
  fake.Write("/sys/fs/cgroup/job/memory.max", "max\n");
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), kMachine);
}

TEST(ProcessMemoryTest, ACgroupV2LimitHereOrAbove) {
  FakeRoot fake;
  fake.Write("/proc/self/cgroup", "0::/kubepods/pod1/c1\n");
  fake.Write("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "max\n");
  fake.Write("/sys/fs/cgroup/kubepods/pod1/memory.max", "4294967296\n");
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), uint64_t{4} << 30);
  fake.Write("/sys/fs/cgroup/kubepods/pod1/c1/memory.max", "1073741824\n");
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), uint64_t{1} << 30);
}

TEST(ProcessMemoryTest, ACgroupV1LimitAndItsNoLimitValue) {
  FakeRoot fake;
  fake.Write("/proc/self/cgroup",
             "9:name=systemd:/\n4:memory:/docker/abc\n3:cpuset:/\n");
  fake.Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
             "9223372036854771712\n");
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), kMachine);
  fake.Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
             "2147483648\n");
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), uint64_t{2} << 30);
  // A limit above the machine's memory leaves the machine's.
  fake.Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes",
             "109951162777600\n");
  EXPECT_EQ(AvailableMemoryBytes(fake.root()), kMachine);
}

TEST(ProcessMemoryTest, NothingReadable) {
  EXPECT_EQ(AvailableMemoryBytes("/nonexistent-root"), 0u);
}

}  // namespace
}  // namespace embedps
