// CPU vs CUDA parity of the dense model on random inputs (float32, TF32
// off): loss, logits, parameter gradients and row gradients agree to a
// relative error < 1e-4 (max-norm), and so do the parameters after a few
// optimizer steps. The CUDA model's host arrays are page-locked and give
// the same steps as pageable memory. Skips with a message where no CUDA
// device exists.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/status_matchers.h"
#include "dense/device.h"
#include "dense/model.h"
#include "dense/unique_rows_testing.h"
#include "gtest/gtest.h"

namespace embedps::dense {
namespace {

double RelativeError(const std::vector<float>& got,
                     const std::vector<float>& want) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    ref = std::max(ref, std::abs(static_cast<double>(want[i])));
  }
  return ref == 0 ? diff : diff / ref;
}

class ModelParityTest : public ::testing::TestWithParam<ModelSpec> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
    if (!devices.ok()) {
      GTEST_SKIP() << "no CUDA device: " << devices.status();
    }
  }
};

TEST_P(ModelParityTest, CpuAndCudaAgree) {
  const ModelSpec spec = GetParam();
  ASSERT_OK_AND_ASSIGN(auto cpu, CreateModel(spec, {}));
  ModelOptions cuda_options;
  cuda_options.backend = Backend::kCuda;
  ASSERT_OK_AND_ASSIGN(auto cuda, CreateModel(spec, cuda_options));
  const size_t n = cpu->num_parameters();
  std::vector<float> p_cpu(n), p_cuda(n);
  ASSERT_OK(cpu->GetParameters(absl::MakeSpan(p_cpu)));
  ASSERT_OK(cuda->GetParameters(absl::MakeSpan(p_cuda)));
  ASSERT_EQ(p_cpu, p_cuda) << "same seed, same initial parameters";

  DenseOptimizerSpec adam;
  adam.learning_rate = 1e-2;
  ASSERT_OK_AND_ASSIGN(auto opt_cpu, DenseOptimizer::Create(adam, n));
  // Its steps on the device (CudaDenseOptimizer).
  ASSERT_OK_AND_ASSIGN(auto opt_cuda, cuda->NewOptimizer(adam));

  constexpr int kBatch = 257;  // not a multiple of any block size
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0, 1);
  for (int step = 0; step < 5; ++step) {
    std::vector<float> dense(kBatch * spec.num_dense), labels(kBatch);
    for (float& x : dense) x = normal(rng);
    for (float& y : labels) y = static_cast<float>(rng() % 2);
    std::vector<std::vector<float>> rows(spec.slots.size());
    std::vector<std::vector<int32_t>> offsets(spec.slots.size());
    std::vector<std::vector<float>> g_cpu(spec.slots.size()),
        g_cuda(spec.slots.size());
    Batch<float> batch;
    batch.size = kBatch;
    batch.dense = dense;
    batch.labels = labels;
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      offsets[s] = {0};
      for (int b = 0; b < kBatch; ++b) {
        offsets[s].push_back(offsets[s].back() + static_cast<int>(rng() % 4));
      }
      rows[s].resize(static_cast<size_t>(offsets[s].back()) *
                     spec.embedding_dim);
      for (float& x : rows[s]) x = 0.1f * normal(rng);
      g_cpu[s].resize(rows[s].size());
      g_cuda[s].resize(rows[s].size());
    }
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      batch.slots.push_back({rows[s], offsets[s]});
    }
    std::vector<absl::Span<float>> s_cpu, s_cuda;
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      s_cpu.push_back(absl::MakeSpan(g_cpu[s]));
      s_cuda.push_back(absl::MakeSpan(g_cuda[s]));
    }
    ASSERT_OK_AND_ASSIGN(float loss_cpu, cpu->TrainStep(batch, s_cpu));
    ASSERT_OK_AND_ASSIGN(float loss_cuda, cuda->TrainStep(batch, s_cuda));
    EXPECT_NEAR(loss_cuda, loss_cpu, 1e-4 * std::abs(loss_cpu)) << step;
    std::vector<float> grad_cpu(n), grad_cuda(n);
    ASSERT_OK(cpu->GetGradients(absl::MakeSpan(grad_cpu)));
    ASSERT_OK(cuda->GetGradients(absl::MakeSpan(grad_cuda)));
    EXPECT_LT(RelativeError(grad_cuda, grad_cpu), 1e-4) << "step " << step;
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      EXPECT_LT(RelativeError(g_cuda[s], g_cpu[s]), 1e-4)
          << "row gradients of slot " << s << ", step " << step;
    }
    std::vector<float> logits_cpu(kBatch), logits_cuda(kBatch);
    ASSERT_OK(cpu->LastLogits(absl::MakeSpan(logits_cpu)));
    ASSERT_OK(cuda->LastLogits(absl::MakeSpan(logits_cuda)));
    EXPECT_LT(RelativeError(logits_cuda, logits_cpu), 1e-4) << step;
    ASSERT_OK(cpu->Predict(batch, absl::MakeSpan(logits_cpu)));
    ASSERT_OK(cuda->Predict(batch, absl::MakeSpan(logits_cuda)));
    EXPECT_LT(RelativeError(logits_cuda, logits_cpu), 1e-4) << step;
    ASSERT_OK(cpu->ApplyOptimizer(*opt_cpu));
    ASSERT_OK(cuda->ApplyOptimizer(*opt_cuda));
  }
  ASSERT_OK(cpu->GetParameters(absl::MakeSpan(p_cpu)));
  ASSERT_OK(cuda->GetParameters(absl::MakeSpan(p_cuda)));
  EXPECT_LT(RelativeError(p_cuda, p_cpu), 1e-4);
}

ModelSpec Dlrm();
ModelSpec Dcn(bool slots);

// On the device, the unique-rows step (pooling from unique rows, sums per
// unique row after a sort) gives what the bag-layout step gives with the
// host's sums, and what the CPU backend gives; for several optimizer
// steps, with weighted and mean bags over two tables; DLRM and DCN-v2.
class CudaUniqueRowsTest : public ::testing::TestWithParam<ModelSpec> {};

TEST_P(CudaUniqueRowsTest, TheDeviceStagesGiveTheHostStagesSteps) {
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  if (!devices.ok()) GTEST_SKIP() << "no CUDA device: " << devices.status();
  const ModelSpec spec = GetParam();
  ModelOptions options;
  options.backend = Backend::kCuda;
  ASSERT_OK_AND_ASSIGN(auto device_stages, CreateModel(spec, options));
  ASSERT_OK_AND_ASSIGN(auto host_stages, CreateModel(spec, options));
  ASSERT_OK_AND_ASSIGN(auto cpu, CreateModel(spec, {}));
  const size_t n = cpu->num_parameters();
  DenseOptimizerSpec adam;
  adam.learning_rate = 1e-2;
  // The device-stage model steps on the device, the host-stage one with
  // the host's optimizer over copies of its buffers.
  std::vector<std::unique_ptr<DenseOptimizer>> optimizers;
  ASSERT_OK_AND_ASSIGN(auto on_device, device_stages->NewOptimizer(adam));
  optimizers.push_back(std::move(on_device));
  for (int i = 1; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(auto optimizer, DenseOptimizer::Create(adam, n));
    optimizers.push_back(std::move(optimizer));
  }
  const float scale = 0.5f;
  for (uint32_t step = 0; step < 4; ++step) {
    const RandomUniqueRows data(spec, 300 + step, step);
    const UniqueRowsBatch batch = data.Batch();
    auto tables = [&] {
      return std::vector<std::vector<float>>{
          std::vector<float>(data.table_floats(0), -1.0f),
          std::vector<float>(data.table_floats(1), -1.0f)};
    };
    auto spans = [](std::vector<std::vector<float>>& v) {
      return std::vector<absl::Span<float>>{absl::MakeSpan(v[0]),
                                            absl::MakeSpan(v[1])};
    };
    std::vector<std::vector<float>> on_device = tables(), on_host = tables(),
                                    on_cpu = tables();
    ASSERT_OK_AND_ASSIGN(const float loss, device_stages->TrainStepOnUniqueRows(
                                               batch, scale, spans(on_device)));
    ASSERT_OK_AND_ASSIGN(
        const float cpu_loss,
        cpu->TrainStepOnUniqueRows(batch, scale, spans(on_cpu)));
    ASSERT_OK_AND_ASSIGN(
        const float host_loss,
        data.BagStepWithHostSums(*host_stages, scale, on_host));
    EXPECT_NEAR(loss, host_loss, 1e-6 * std::abs(host_loss)) << step;
    EXPECT_NEAR(loss, cpu_loss, 1e-4 * std::abs(cpu_loss)) << step;
    for (int t = 0; t < 2; ++t) {
      EXPECT_LT(RelativeError(on_device[t], on_host[t]), 1e-6)
          << "table " << t << ", step " << step;
      EXPECT_LT(RelativeError(on_device[t], on_cpu[t]), 1e-4)
          << "table " << t << ", step " << step;
    }
    std::vector<float> logits(batch.size), cpu_logits(batch.size);
    ASSERT_OK(
        device_stages->PredictOnUniqueRows(batch, absl::MakeSpan(logits)));
    ASSERT_OK(cpu->PredictOnUniqueRows(batch, absl::MakeSpan(cpu_logits)));
    EXPECT_LT(RelativeError(logits, cpu_logits), 1e-4) << step;
    ASSERT_OK(device_stages->ApplyOptimizer(*optimizers[0]));
    ASSERT_OK(host_stages->ApplyOptimizer(*optimizers[1]));
    ASSERT_OK(cpu->ApplyOptimizer(*optimizers[2]));
  }
  std::vector<float> p_device(n), p_cpu(n);
  ASSERT_OK(device_stages->GetParameters(absl::MakeSpan(p_device)));
  ASSERT_OK(cpu->GetParameters(absl::MakeSpan(p_cpu)));
  EXPECT_LT(RelativeError(p_device, p_cpu), 1e-4);
}

// Batches in the model's page-locked host arrays (whose copies are
// asynchronous DMA) give the steps that the same batches in pageable
// memory give a twin model (to float rounding: a copy that raced its
// kernels would be far off); new contents each step.
TEST(CudaHostArrayTest, PageLockedArraysGiveTheStepsOfPageableMemory) {
  absl::StatusOr<std::vector<CudaDeviceInfo>> devices = ListCudaDevices();
  if (!devices.ok()) GTEST_SKIP() << "no CUDA device: " << devices.status();
  const ModelSpec spec = Dlrm();
  ModelOptions options;
  options.backend = Backend::kCuda;
  ASSERT_OK_AND_ASSIGN(auto pinned_model, CreateModel(spec, options));
  ASSERT_OK_AND_ASSIGN(auto pageable_model, CreateModel(spec, options));

  constexpr int kBatch = 300;
  const size_t slot_floats = static_cast<size_t>(kBatch) * spec.embedding_dim;
  std::vector<HostArray> rows, grads;
  std::vector<std::vector<float>> plain_rows(spec.slots.size()),
      plain_grads(spec.slots.size());
  for (size_t s = 0; s < spec.slots.size(); ++s) {
    ASSERT_OK_AND_ASSIGN(HostArray r, pinned_model->NewHostArray(slot_floats));
    ASSERT_OK_AND_ASSIGN(HostArray g, pinned_model->NewHostArray(slot_floats));
    cudaPointerAttributes attributes;
    ASSERT_EQ(cudaPointerGetAttributes(&attributes, r.data()), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeHost) << "page-locked";
    rows.push_back(std::move(r));
    grads.push_back(std::move(g));
    plain_rows[s].resize(slot_floats);
    plain_grads[s].resize(slot_floats);
  }
  std::vector<int32_t> offsets(kBatch + 1);
  for (int b = 0; b <= kBatch; ++b) offsets[b] = b;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0, 1);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> dense(kBatch * spec.num_dense), labels(kBatch);
    for (float& x : dense) x = normal(rng);
    for (float& y : labels) y = static_cast<float>(rng() % 2);
    Batch<float> pinned, pageable;
    pinned.size = pageable.size = kBatch;
    pinned.dense = pageable.dense = dense;
    pinned.labels = pageable.labels = labels;
    std::vector<absl::Span<float>> pinned_grads, pageable_grads;
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      for (size_t i = 0; i < slot_floats; ++i) {
        plain_rows[s][i] = rows[s].data()[i] = 0.1f * normal(rng);
      }
      pinned.slots.push_back({rows[s].span(), offsets});
      pageable.slots.push_back({plain_rows[s], offsets});
      pinned_grads.push_back(grads[s].span());
      pageable_grads.push_back(absl::MakeSpan(plain_grads[s]));
    }
    ASSERT_OK_AND_ASSIGN(float pinned_loss,
                         pinned_model->TrainStep(pinned, pinned_grads));
    ASSERT_OK_AND_ASSIGN(float pageable_loss,
                         pageable_model->TrainStep(pageable, pageable_grads));
    EXPECT_NEAR(pinned_loss, pageable_loss, 1e-6 * std::abs(pageable_loss))
        << "step " << step;
    for (size_t s = 0; s < spec.slots.size(); ++s) {
      const std::vector<float> got(grads[s].data(),
                                   grads[s].data() + slot_floats);
      EXPECT_LT(RelativeError(got, plain_grads[s]), 1e-6)
          << "row gradients of slot " << s << ", step " << step;
    }
  }
}

ModelSpec Dlrm() {
  ModelSpec spec;
  spec.num_dense = 13;
  spec.bottom = {64, 16};
  spec.embedding_dim = 16;
  spec.slots = {Pooling::kSum,  Pooling::kMean, Pooling::kSum, Pooling::kSum,
                Pooling::kMean, Pooling::kSum,  Pooling::kSum, Pooling::kSum};
  spec.top = {64, 32};
  spec.seed = 17;
  return spec;
}

// DCN-v2: the features through 2 cross layers; and over the dense
// features alone (no slots).
ModelSpec Dcn(bool slots) {
  ModelSpec spec = Dlrm();
  if (!slots) spec.slots.clear();
  spec.interaction = Interaction::kCross;
  spec.cross_layers = 2;
  return spec;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaUniqueRowsTest,
                         ::testing::Values(Dlrm(), Dcn(/*slots=*/true)));

INSTANTIATE_TEST_SUITE_P(Shapes, ModelParityTest,
                         ::testing::Values(Dlrm(),
                                           MlpModelSpec(40, {64, 32}, 5),
                                           Dcn(/*slots=*/true),
                                           Dcn(/*slots=*/false)));

}  // namespace
}  // namespace embedps::dense
