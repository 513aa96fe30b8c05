#include "dense/host_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>

#include "common/status_matchers.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;

int releases = 0;
void CountingRelease(void* p) {
  ++releases;
  delete[] static_cast<float*>(p);
}

TEST(HostArrayTest, PlainArraysAreAlignedAndWritable) {
  for (size_t size : {1, 15, 16, 1000, 1 << 20}) {
    ASSERT_OK_AND_ASSIGN(HostArray a, NewPlainHostArray(size));
    ASSERT_EQ(a.size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    for (size_t i = 0; i < size; ++i) a.data()[i] = static_cast<float>(i);
    EXPECT_EQ(a.span()[size - 1], static_cast<float>(size - 1));
  }
}

TEST(HostArrayTest, EmptyArraysHoldNoMemory) {
  ASSERT_OK_AND_ASSIGN(HostArray a, NewPlainHostArray(0));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_TRUE(a.span().empty());
  HostArray b;
  EXPECT_EQ(b.size(), 0u);
}

TEST(HostArrayTest, MemoryTooLargeIsRefusedNotAllocated) {
  EXPECT_THAT(NewPlainHostArray(std::numeric_limits<size_t>::max() / 2),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST(HostArrayTest, MovesHandOverTheMemoryAndReleaseItOnce) {
  releases = 0;
  {
    HostArray a(new float[8], 8, &CountingRelease);
    a.data()[7] = 3.0f;
    HostArray b(std::move(a));
    EXPECT_EQ(b.size(), 8u);
    EXPECT_EQ(b.data()[7], 3.0f);
    HostArray c(new float[4], 4, &CountingRelease);
    c = std::move(b);  // c's own memory goes to b, released with it
    EXPECT_EQ(c.size(), 8u);
    EXPECT_EQ(releases, 0);
  }
  EXPECT_EQ(releases, 2);
}

}  // namespace
}  // namespace embedps::dense
