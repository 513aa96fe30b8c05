// Runs everywhere: without CUDA or without a GPU the factory must say so
// with FAILED_PRECONDITION.
#include "dense/collective/nccl_communicator.h"

#include "common/status_matchers.h"
#include "dense/collective/in_memory_store.h"
#include "dense/device.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

TEST(NcclCommunicatorTest, WithoutAGpuTheFactorySaysSo) {
  if (ListCudaDevices().ok())
    GTEST_SKIP() << "a GPU is present; nccl_gpu_test covers it";
  InMemoryStore store;
  EXPECT_THAT(
      CreateNcclCommunicator(NcclOptions{}, &store),
      ::embedps::testing::StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST(NcclCommunicatorTest, BadRankIsRefused) {
  InMemoryStore store;
  NcclOptions options;
  options.rank = 2;
  options.world_size = 2;
  EXPECT_THAT(CreateNcclCommunicator(options, &store),
              ::embedps::testing::StatusIs(
                  BuiltWithCuda() ? absl::StatusCode::kInvalidArgument
                                  : absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace embedps::dense
