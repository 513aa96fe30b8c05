// CudaDenseOptimizer: a DenseOptimizer (dense/dense_optimizer.h) whose
// moments live in device memory and whose step is one kernel
// (dense_optimizer_kernels.cuh) of dense_update.h's rule: the CUDA model's
// NewOptimizer, so that a training step updates its parameters where they
// are, with no copy to the host and back.
//
// StepOnDevice runs on the caller's stream (the model's) and returns at
// once; SaveState, RestoreState and Step over host spans wait for the
// steps enqueued before them. The state bytes are the host optimizer's,
// and with the device rounding as the host does (no fused multiply-add)
// the steps are the host's bit for bit.
//
// Thread safety: one thread at a time, as DenseOptimizer.
#ifndef EMBEDPS_DENSE_CUDA_CUDA_DENSE_OPTIMIZER_H_
#define EMBEDPS_DENSE_CUDA_CUDA_DENSE_OPTIMIZER_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "dense/cuda/device_array.h"
#include "dense/dense_optimizer.h"

namespace embedps::dense {

class CudaDenseOptimizer final : public DenseOptimizer {
 public:
  // INVALID_ARGUMENT naming the field for a bad spec; INTERNAL (or
  // FAILED_PRECONDITION) with the CUDA error when device `device` cannot
  // hold the moments.
  static absl::StatusOr<std::unique_ptr<CudaDenseOptimizer>> Create(
      const DenseOptimizerSpec& spec, size_t num_parameters, int device);
  ~CudaDenseOptimizer() override;

  // The device the moments are on.
  int device() const { return device_; }

  // One step of `parameters` from `gradients` (device memory of device(),
  // num_parameters floats each), enqueued on `stream`.
  absl::Status StepOnDevice(float* parameters, const float* gradients,
                            cudaStream_t stream);

  double LearningRate(int64_t step) const override;
  // Over host memory: copies them to the device and back (for callers that
  // hold host buffers; the CUDA model calls StepOnDevice).
  absl::Status Step(absl::Span<float> parameters,
                    absl::Span<const float> gradients) override;
  int64_t steps() const override { return step_; }
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(absl::string_view state) override;

 private:
  CudaDenseOptimizer(const DenseOptimizerSpec& spec, size_t n, int device)
      : spec_(spec), n_(n), device_(device) {}
  absl::Status Initialize();
  // Makes the device current and `stream` wait for the last work on the
  // moments.
  absl::Status Begin(cudaStream_t stream) const;
  // Records the work enqueued on `stream` as the moments' last.
  absl::Status End(cudaStream_t stream);

  const DenseOptimizerSpec spec_;
  const size_t n_;
  const int device_;
  DeviceArray<float> first_, second_;
  // Step over host spans: the spans' device copies, on stream_.
  DeviceArray<float> parameters_, gradients_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t last_ = nullptr;  // after the last work on the moments
  int64_t step_ = 0;
};

}  // namespace embedps::dense

#endif  // EMBEDPS_DENSE_CUDA_CUDA_DENSE_OPTIMIZER_H_
