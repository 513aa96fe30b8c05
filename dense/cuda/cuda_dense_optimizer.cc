#include "dense/cuda/cuda_dense_optimizer.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "dense/cuda/cuda_status.h"
#include "dense/cuda/dense_optimizer_kernels.cuh"

namespace embedps::dense {

absl::StatusOr<std::unique_ptr<CudaDenseOptimizer>> CudaDenseOptimizer::Create(
    const DenseOptimizerSpec& spec, size_t num_parameters, int device) {
  RETURN_IF_ERROR(ValidateDenseOptimizerSpec(spec));
  std::unique_ptr<CudaDenseOptimizer> optimizer(
      new CudaDenseOptimizer(spec, num_parameters, device));
  RETURN_IF_ERROR(optimizer->Initialize());
  return optimizer;
}

absl::Status CudaDenseOptimizer::Initialize() {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_),
                             absl::StrCat("cudaSetDevice(", device_, ")")));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                 "cudaStreamCreate"));
  RETURN_IF_ERROR(
      CudaStatus(cudaEventCreateWithFlags(&last_, cudaEventDisableTiming),
                 "cudaEventCreate"));
  for (auto [moments, size] :
       {std::pair{&first_, FirstMomentsOf(spec_, n_)},
        std::pair{&second_, SecondMomentsOf(spec_, n_)}}) {
    RETURN_IF_ERROR(moments->Resize(size));
    if (size == 0) continue;
    RETURN_IF_ERROR(CudaStatus(
        cudaMemsetAsync(moments->data(), 0, size * sizeof(float), stream_),
        "zeroing the optimizer's moments"));
  }
  return End(stream_);
}

CudaDenseOptimizer::~CudaDenseOptimizer() {
  if (cudaSetDevice(device_) != cudaSuccess) return;
  // The moments are freed (by their arrays) once no step uses them.
  if (last_ != nullptr) {
    cudaEventSynchronize(last_);
    cudaEventDestroy(last_);
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

absl::Status CudaDenseOptimizer::Begin(cudaStream_t stream) const {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_),
                             absl::StrCat("cudaSetDevice(", device_, ")")));
  return CudaStatus(cudaStreamWaitEvent(stream, last_, 0),
                    "waiting for the optimizer's last step");
}

absl::Status CudaDenseOptimizer::End(cudaStream_t stream) {
  return CudaStatus(cudaEventRecord(last_, stream),
                    "recording the optimizer's step");
}

double CudaDenseOptimizer::LearningRate(int64_t step) const {
  return DenseLearningRate(spec_, step);
}

absl::Status CudaDenseOptimizer::StepOnDevice(float* parameters,
                                              const float* gradients,
                                              cudaStream_t stream) {
  RETURN_IF_ERROR(Begin(stream));
  dense_cuda::LaunchDenseStep(
      DenseStepRuleOf(spec_, step_), parameters, gradients,
      first_.size() > 0 ? first_.data() : nullptr,
      second_.size() > 0 ? second_.data() : nullptr, n_, stream);
  RETURN_IF_ERROR(
      CudaStatus(cudaGetLastError(), "the dense optimizer's kernel launch"));
  ++step_;
  return End(stream);
}

absl::Status CudaDenseOptimizer::Step(absl::Span<float> parameters,
                                      absl::Span<const float> gradients) {
  if (parameters.size() != n_ || gradients.size() != n_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dense optimizer holds ", n_, " parameters; got ", parameters.size(),
        " parameters and ", gradients.size(), " gradients"));
  }
  RETURN_IF_ERROR(Begin(stream_));
  RETURN_IF_ERROR(parameters_.Resize(n_));
  RETURN_IF_ERROR(gradients_.Resize(n_));
  const size_t bytes = n_ * sizeof(float);
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(parameters_.data(), parameters.data(), bytes,
                                 cudaMemcpyHostToDevice, stream_),
                 "copying parameters to the device"));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(gradients_.data(), gradients.data(), bytes,
                                 cudaMemcpyHostToDevice, stream_),
                 "copying gradients to the device"));
  RETURN_IF_ERROR(StepOnDevice(parameters_.data(), gradients_.data(), stream_));
  RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(parameters.data(), parameters_.data(), bytes,
                                 cudaMemcpyDeviceToHost, stream_),
                 "copying parameters to the host"));
  return CudaStatus(cudaStreamSynchronize(stream_), "the optimizer's step");
}

absl::StatusOr<std::string> CudaDenseOptimizer::SaveState() const {
  RETURN_IF_ERROR(Begin(stream_));
  std::vector<float> first(first_.size()), second(second_.size());
  for (auto [host, device] :
       {std::pair{&first, &first_}, std::pair{&second, &second_}}) {
    if (host->empty()) continue;
    RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(host->data(), device->data(),
                                               host->size() * sizeof(float),
                                               cudaMemcpyDeviceToHost, stream_),
                               "copying the optimizer's moments to the host"));
  }
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_),
                             "copying the optimizer's moments"));
  return EncodeDenseOptimizerState(step_, first, second);
}

absl::Status CudaDenseOptimizer::RestoreState(absl::string_view state) {
  std::vector<float> first(first_.size()), second(second_.size());
  int64_t steps = 0;
  RETURN_IF_ERROR(DecodeDenseOptimizerState(
      state, n_, &steps, absl::MakeSpan(first), absl::MakeSpan(second)));
  RETURN_IF_ERROR(Begin(stream_));
  for (auto [host, device] :
       {std::pair{&first, &first_}, std::pair{&second, &second_}}) {
    if (host->empty()) continue;
    RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(device->data(), host->data(),
                                   host->size() * sizeof(float),
                                   cudaMemcpyHostToDevice, stream_),
                   "copying the optimizer's moments to the device"));
  }
  // The host vectors go with this call: the copies end first.
  RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_),
                             "copying the optimizer's moments"));
  RETURN_IF_ERROR(End(stream_));
  step_ = steps;
  return absl::OkStatus();
}

}  // namespace embedps::dense
