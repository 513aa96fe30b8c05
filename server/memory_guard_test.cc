#include "server/memory_guard.h"

#include <cstring>
#include <memory>

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::server {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

TEST(MemoryGuardTest, NoLimitAdmitsEverything) {
  MemoryGuard guard(0);
  EXPECT_OK(guard.Admit(uint64_t{1} << 50, [] { return "a huge call"; }));
  EXPECT_EQ(guard.refused(), 0u);
}

TEST(MemoryGuardTest, ReadsTheResidentSetAndRefusesPastTheLimit) {
  MemoryGuard guard(uint64_t{1} << 40, absl::ZeroDuration());
  const uint64_t before = guard.resident_bytes();
  EXPECT_GT(before, 0u);
  // 64 MiB touched shows in the resident set.
  constexpr size_t kBytes = size_t{64} << 20;
  std::unique_ptr<char[]> block(new char[kBytes]);
  std::memset(block.get(), 1, kBytes);
  EXPECT_GE(guard.resident_bytes(), before + kBytes / 2);

  MemoryGuard tight(guard.resident_bytes() + (uint64_t{16} << 20),
                    absl::ZeroDuration());
  EXPECT_OK(tight.Admit(uint64_t{1} << 20, [] { return "a small call"; }));
  EXPECT_THAT(
      tight.Admit(uint64_t{64} << 20, [] { return "Pull of 1000 keys"; }),
      StatusIs(absl::StatusCode::kResourceExhausted,
               HasSubstr("Pull of 1000 keys refused")));
  EXPECT_EQ(tight.refused(), 1u);
  // Keeps the block alive past the reads.
  EXPECT_EQ(block[kBytes - 1], 1);
}

}  // namespace
}  // namespace embedps::server
