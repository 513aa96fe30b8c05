// Tagged gpu: needs a CUDA device, and skips with a message without one.
#include "common/status_matchers.h"
#include "dense/device.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

TEST(DeviceGpuTest, SaxpyKernelRunsOnEveryVisibleDevice) {
  auto devices = ListCudaDevices();
  if (!devices.ok())
    GTEST_SKIP() << "no CUDA device here: " << devices.status();
  for (const CudaDeviceInfo& d : *devices) {
    EXPECT_OK(CheckCudaDevice(d.ordinal)) << d.name;
    std::printf("device %d (%s): saxpy kernel OK\n", d.ordinal, d.name.c_str());
  }
}

}  // namespace
}  // namespace embedps::dense
