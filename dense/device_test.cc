// Runs everywhere: without CUDA (or without a device) the calls must say
// so with FAILED_PRECONDITION; with a device they must work.
#include "dense/device.h"

#include "common/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;

TEST(DeviceTest, AnswersClearlyWithOrWithoutAGpu) {
  auto devices = ListCudaDevices();
  if (!devices.ok()) {
    EXPECT_THAT(devices, StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(CheckCudaDevice(0),
                StatusIs(absl::StatusCode::kFailedPrecondition));
    std::printf("no CUDA device: %s\n", devices.status().ToString().c_str());
    return;
  }
  ASSERT_FALSE(devices->empty());
  for (const CudaDeviceInfo& d : *devices) {
    std::printf("device %d: %s, sm_%d%d, %.1f GiB\n", d.ordinal, d.name.c_str(),
                d.compute_capability_major, d.compute_capability_minor,
                d.memory_bytes / 1073741824.0);
  }
  EXPECT_OK(CheckCudaDevice(0));
  EXPECT_THAT(CheckCudaDevice(static_cast<int>(devices->size())),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(DeviceTest, BuiltWithCudaMatchesTheBuild) {
#ifdef EMBEDPS_EXPECT_CUDA
  EXPECT_TRUE(BuiltWithCuda());
#else
  EXPECT_FALSE(BuiltWithCuda());
#endif
}

}  // namespace
}  // namespace embedps::dense
