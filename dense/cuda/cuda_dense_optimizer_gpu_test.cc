// The device's dense optimizer against the host's: the same steps bit for
// bit (the kernel rounds as the host's loops do), over host spans and over
// device buffers, the same state bytes, a state moved either way
// continuing as the original, and bad sizes refused with nothing changed.
// Skips with a message where no CUDA device exists.
#include <cuda_runtime.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/status_matchers.h"
#include "dense/cuda/cuda_dense_optimizer.h"
#include "dense/device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

using ::embedps::testing::StatusIs;
using ::testing::HasSubstr;

constexpr size_t kN = 100003;  // not a multiple of any block size

std::vector<DenseOptimizerSpec> Specs() {
  std::vector<DenseOptimizerSpec> specs(4);
  specs[0].kind = DenseOptimizerSpec::Kind::kSgd;
  specs[0].learning_rate = 0.05;
  specs[1].kind = DenseOptimizerSpec::Kind::kSgd;
  specs[1].learning_rate = 0.05;
  specs[1].momentum = 0.9;
  specs[2].kind = DenseOptimizerSpec::Kind::kAdam;
  specs[2].learning_rate = 3e-3;
  specs[3].kind = DenseOptimizerSpec::Kind::kAdamW;
  specs[3].learning_rate = 3e-3;
  specs[3].warmup_steps = 3;
  specs[3].decay = DenseOptimizerSpec::Decay::kCosine;
  specs[3].total_steps = 12;
  specs[3].min_learning_rate = 1e-4;
  return specs;
}

std::vector<float> Normal(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0, 0.5f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

class CudaDenseOptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
    if (!devices.ok()) GTEST_SKIP() << "no CUDA device: " << devices.status();
  }
};

TEST_F(CudaDenseOptimizerTest, StepsEqualTheHostsBitForBit) {
  for (const DenseOptimizerSpec& spec : Specs()) {
    SCOPED_TRACE(static_cast<int>(spec.kind));
    ASSERT_OK_AND_ASSIGN(auto host, DenseOptimizer::Create(spec, kN));
    ASSERT_OK_AND_ASSIGN(auto device, CudaDenseOptimizer::Create(spec, kN, 0));
    std::vector<float> p_host = Normal(kN, 1), p_device = p_host;
    for (uint32_t step = 0; step < 12; ++step) {
      const std::vector<float> g = Normal(kN, 100 + step);
      ASSERT_OK(host->Step(absl::MakeSpan(p_host), g));
      ASSERT_OK(device->Step(absl::MakeSpan(p_device), g));
      ASSERT_EQ(p_device, p_host) << "step " << step;
    }
    EXPECT_EQ(device->steps(), 12);
    EXPECT_EQ(device->LearningRate(5), host->LearningRate(5));
    ASSERT_OK_AND_ASSIGN(std::string host_state, host->SaveState());
    ASSERT_OK_AND_ASSIGN(std::string device_state, device->SaveState());
    EXPECT_EQ(device_state, host_state);
  }
}

// As the CUDA model calls it: parameters and gradients in device memory,
// the step on the caller's stream.
TEST_F(CudaDenseOptimizerTest, StepOnDeviceBuffersOnTheCallersStream) {
  const DenseOptimizerSpec spec = Specs()[2];
  ASSERT_OK_AND_ASSIGN(auto host, DenseOptimizer::Create(spec, kN));
  ASSERT_OK_AND_ASSIGN(auto device, CudaDenseOptimizer::Create(spec, kN, 0));
  std::vector<float> p_host = Normal(kN, 2), p_device(kN);
  float *p = nullptr, *g = nullptr;
  ASSERT_EQ(cudaMalloc(&p, kN * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&g, kN * sizeof(float)), cudaSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
            cudaSuccess);
  ASSERT_EQ(
      cudaMemcpy(p, p_host.data(), kN * sizeof(float), cudaMemcpyHostToDevice),
      cudaSuccess);
  for (uint32_t step = 0; step < 5; ++step) {
    const std::vector<float> grads = Normal(kN, 200 + step);
    ASSERT_OK(host->Step(absl::MakeSpan(p_host), grads));
    ASSERT_EQ(cudaMemcpyAsync(g, grads.data(), kN * sizeof(float),
                              cudaMemcpyHostToDevice, stream),
              cudaSuccess);
    ASSERT_OK(device->StepOnDevice(p, g, stream));
    // The source of the copy must outlive it.
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  }
  ASSERT_EQ(cudaMemcpy(p_device.data(), p, kN * sizeof(float),
                       cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(p_device, p_host);
  // SaveState waits for the steps on the other stream.
  ASSERT_OK_AND_ASSIGN(std::string host_state, host->SaveState());
  ASSERT_OK_AND_ASSIGN(std::string device_state, device->SaveState());
  EXPECT_EQ(device_state, host_state);
  cudaStreamDestroy(stream);
  cudaFree(p);
  cudaFree(g);
}

TEST_F(CudaDenseOptimizerTest, StateMovesBetweenHostAndDevice) {
  const DenseOptimizerSpec spec = Specs()[3];
  ASSERT_OK_AND_ASSIGN(auto host, DenseOptimizer::Create(spec, kN));
  std::vector<float> params = Normal(kN, 3);
  for (uint32_t step = 0; step < 4; ++step) {
    ASSERT_OK(host->Step(absl::MakeSpan(params), Normal(kN, 300 + step)));
  }
  // Host → device → host again, each continuing as the original.
  ASSERT_OK_AND_ASSIGN(auto device, CudaDenseOptimizer::Create(spec, kN, 0));
  ASSERT_OK_AND_ASSIGN(std::string state, host->SaveState());
  ASSERT_OK(device->RestoreState(state));
  EXPECT_EQ(device->steps(), 4);
  std::vector<float> on_device = params;
  for (uint32_t step = 4; step < 8; ++step) {
    const std::vector<float> g = Normal(kN, 300 + step);
    ASSERT_OK(host->Step(absl::MakeSpan(params), g));
    ASSERT_OK(device->Step(absl::MakeSpan(on_device), g));
  }
  EXPECT_EQ(on_device, params);
  ASSERT_OK_AND_ASSIGN(auto back, DenseOptimizer::Create(spec, kN));
  ASSERT_OK_AND_ASSIGN(std::string device_state, device->SaveState());
  ASSERT_OK(back->RestoreState(device_state));
  std::vector<float> on_host = on_device;
  for (uint32_t step = 8; step < 12; ++step) {
    const std::vector<float> g = Normal(kN, 300 + step);
    ASSERT_OK(back->Step(absl::MakeSpan(on_host), g));
    ASSERT_OK(device->Step(absl::MakeSpan(on_device), g));
  }
  EXPECT_EQ(on_host, on_device);
}

TEST_F(CudaDenseOptimizerTest, BadSizesAndStatesChangeNothing) {
  const DenseOptimizerSpec spec = Specs()[2];
  ASSERT_OK_AND_ASSIGN(auto device, CudaDenseOptimizer::Create(spec, kN, 0));
  std::vector<float> params(kN, 1.0f), short_grads(kN - 1, 1.0f);
  EXPECT_THAT(device->Step(absl::MakeSpan(params), short_grads),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds 100003 parameters")));
  EXPECT_EQ(device->steps(), 0);
  EXPECT_THAT(device->RestoreState("not a state"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs")));
  EXPECT_EQ(device->steps(), 0);
  ASSERT_OK_AND_ASSIGN(auto fresh, DenseOptimizer::Create(spec, kN));
  EXPECT_EQ(*device->SaveState(), *fresh->SaveState());
  DenseOptimizerSpec bad = spec;
  bad.beta1 = 1.0;
  EXPECT_THAT(CudaDenseOptimizer::Create(bad, kN, 0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("beta1")));
}

}  // namespace
}  // namespace embedps::dense
