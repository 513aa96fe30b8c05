// Tagged gpu: NCCL with world size 1 on device 0 (one GPU per machine
// here; multi-rank collectives are tested with Gloo). Skips without a GPU.
#include <cuda_runtime.h>

#include <vector>

#include "common/status_matchers.h"
#include "dense/collective/in_memory_store.h"
#include "dense/collective/nccl_communicator.h"
#include "dense/device.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

TEST(NcclGpuTest, WorldSizeOneCollectivesOnDeviceBuffers) {
  if (!ListCudaDevices().ok()) GTEST_SKIP() << "no CUDA device here";
  InMemoryStore store;
  ASSERT_OK_AND_ASSIGN(auto comm,
                       CreateNcclCommunicator(NcclOptions{}, &store));
  constexpr size_t kN = 1003;
  std::vector<float> host(kN);
  for (size_t i = 0; i < kN; ++i) host[i] = 0.5f * i - 7.0f;
  float* device = nullptr;
  float* gathered = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&gathered, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), kN * sizeof(float),
                       cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_OK(comm->AllReduce(absl::MakeSpan(device, kN), ReduceOp::kSum));
  ASSERT_OK(comm->AllReduce(absl::MakeSpan(device, kN), ReduceOp::kMean));
  ASSERT_OK(comm->Broadcast(absl::MakeSpan(device, kN), 0));
  ASSERT_OK(comm->AllGather(absl::MakeConstSpan(device, kN),
                            absl::MakeSpan(gathered, kN)));
  ASSERT_OK(comm->Barrier());
  std::vector<float> back(kN);
  ASSERT_EQ(cudaMemcpy(back.data(), gathered, kN * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(back, host);  // one rank: every collective is the identity
  cudaFree(device);
  cudaFree(gathered);
}

}  // namespace
}  // namespace embedps::dense
